"""Sending: check each engine answers for its model, then run the phases and time every request.

Timing is client/stream.py's (the one implementation); this module only decides what to send when.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from client.endpoint import Endpoint
from client.stream import STREAM_TIMEOUT, RequestRecord, chat_payload, stream_chat
from labs.compare.workload import TEMPERATURE, Phase

PROBE_TIMEOUT_S = 10.0
WARMUP_PROMPT = "Say OK."
WARMUP_MAX_TOKENS = 8


@dataclass(slots=True)
class PhaseRun:
    """One phase against one engine: its records and the wall-clock span (perf_counter seconds)."""

    engine: str
    mode: str
    concurrent: bool
    records: list[RequestRecord]
    started_s: float
    finished_s: float
    note: str = ""

    @property
    def wall_s(self) -> float:
        return self.finished_s - self.started_s


@dataclass(slots=True)
class EngineFacts:
    engine: str
    api_url: str
    model: str
    served_models: list[str]
    version: dict[str, Any] = field(default_factory=dict)


def http_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=STREAM_TIMEOUT)  # 16 answers queued on a single-stream server take minutes


async def check(http: httpx.AsyncClient, target: Endpoint) -> EngineFacts:
    """The engine answers /v1/models and serves the model (EndpointError, one line with the fix, if not)."""
    served = [model.id for model in await asyncio.to_thread(target.check, PROBE_TIMEOUT_S)]
    version: dict[str, Any] = {}
    try:
        answer = await http.get(f"{target.root_url}/version", timeout=PROBE_TIMEOUT_S)
        if answer.status_code == 200:
            version = answer.json()
    except (httpx.HTTPError, ValueError):
        pass  # llama.cpp's server has no /version; the facts record that as empty
    return EngineFacts(target.name, target.base_url, target.model, served, version)


def _payload(target: Endpoint, prompt: str, max_tokens: int) -> dict[str, Any]:
    return chat_payload(target.model, [{"role": "user", "content": prompt}], max_tokens, TEMPERATURE)


async def _send(
    http: httpx.AsyncClient,
    target: Endpoint,
    request_id: int,
    prompt: str,
    max_tokens: int,
    on_done: Callable[[RequestRecord], None],
) -> RequestRecord:
    record = RequestRecord(request_id, max_tokens, scheduled_s=time.perf_counter())
    await stream_chat(http, target.base_url, _payload(target, prompt, max_tokens), record, target.api_key)
    on_done(record)
    return record


async def warm_up(http: httpx.AsyncClient, target: Endpoint) -> RequestRecord:
    """One short request before timing, so no engine pays a first-request cost inside a phase."""
    record = RequestRecord(0, WARMUP_MAX_TOKENS, scheduled_s=time.perf_counter())
    return await stream_chat(
        http, target.base_url, _payload(target, WARMUP_PROMPT, WARMUP_MAX_TOKENS), record, target.api_key
    )


async def run_phase(
    http: httpx.AsyncClient, target: Endpoint, phase: Phase, max_tokens: int, on_done: Callable[[RequestRecord], None]
) -> PhaseRun:
    """Send the phase's prompts one after another, or all at once; `on_done` sees each finished record."""
    started = time.perf_counter()
    if phase.concurrent:
        records = list(
            await asyncio.gather(
                *(
                    _send(http, target, number, prompt, max_tokens, on_done)
                    for number, prompt in enumerate(phase.prompts, start=1)
                )
            )
        )
    else:
        records = [
            await _send(http, target, number, prompt, max_tokens, on_done)
            for number, prompt in enumerate(phase.prompts, start=1)
        ]
    return PhaseRun(target.name, phase.mode, phase.concurrent, records, started, time.perf_counter())


def engine_died(run: PhaseRun) -> bool:
    """No request of the phase got any HTTP answer: the engine is gone, not merely slow."""
    return all(record.status is None for record in run.records)
