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
from client.stream import STREAM_TIMEOUT, RequestRecord, chat_payload, send_each, stream_chat, tls
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
    # 16 answers queued on a single-stream server take minutes; tls(): built once, before any phase is timed
    return httpx.AsyncClient(timeout=STREAM_TIMEOUT, verify=tls())


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


@dataclass(frozen=True, slots=True)
class PhaseRequest:
    request_id: int
    prompt: str
    max_tokens: int


async def warm_up(http: httpx.AsyncClient, target: Endpoint) -> RequestRecord:
    """One short request before timing, so no engine pays a first-request cost inside a phase."""
    record = RequestRecord(0, WARMUP_MAX_TOKENS, scheduled_s=time.perf_counter())
    return await stream_chat(
        http, target.base_url, _payload(target, WARMUP_PROMPT, WARMUP_MAX_TOKENS), record, target.api_key
    )


async def run_phase(
    target: Endpoint, phase: Phase, max_tokens: int, on_done: Callable[[RequestRecord], None]
) -> PhaseRun:
    """Send the phase's prompts one after another (one user), or all at once (a user each): client/stream.py's
    closed loop; `on_done` sees each finished record."""
    started = time.perf_counter()
    requests = [PhaseRequest(number, prompt, max_tokens) for number, prompt in enumerate(phase.prompts, start=1)]
    users = len(requests) if phase.concurrent else 1
    records = await send_each(target, users, requests, on_done, TEMPERATURE)
    return PhaseRun(target.name, phase.mode, phase.concurrent, records, started, time.perf_counter())


def engine_died(run: PhaseRun) -> bool:
    """No request of the phase got any HTTP answer: the engine is gone, not merely slow."""
    return all(record.status is None for record in run.records)
