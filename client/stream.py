"""Timing one request: a streaming chat completion with every timestamp recorded raw.

The one implementation of "send a request and time it", shared by the comparison lab, the load tester and
the benchmarks. Timestamps are `time.perf_counter()` seconds; every derived metric is computed elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

import httpx

from client.endpoint import Endpoint

# finish_reason values that mean the server finished the answer on purpose
COMPLETE_FINISH_REASONS = ("stop", "length")
# a streamed answer may wait minutes behind others on a busy CPU engine; a refused connection is known at once
STREAM_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
ONE_CONNECTION = httpx.Limits(max_connections=1, max_keepalive_connections=1)  # a user's: one request at a time


@cache
def tls() -> ssl.SSLContext:
    """Built once a process: building one per client costs milliseconds, and a closed loop starts a client per user
    inside the time it measures."""
    return ssl.create_default_context()


def user_client() -> httpx.AsyncClient:
    """One user's keep-alive connection: its own client, so that no request scans a shared pool."""
    return httpx.AsyncClient(timeout=STREAM_TIMEOUT, limits=ONE_CONNECTION, verify=tls())


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request, as raw perf_counter timestamps and what the server reported."""

    request_id: int
    max_tokens: int
    scheduled_s: float  # when the workload wanted it sent (open loop); == sent_s in a closed loop
    sent_s: float = 0.0
    first_token_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)  # one per streamed chunk with content
    done_s: float | None = None
    status: int | None = None  # HTTP status; None when no answer came at all
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None  # usage.completion_tokens as the server counted them
    text: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        """200, a non-empty answer, a finish reason that says the server meant to stop there, not truncated."""
        return (
            self.status == 200
            and self.error is None
            and bool(self.text.strip())
            and self.finish_reason in COMPLETE_FINISH_REASONS
            and not self.truncated
        )

    @property
    def truncated(self) -> bool:
        """A 200 whose answer was cut short: no proper finish reason, or fewer tokens than a 'length' stop."""
        if self.status != 200 or self.error is not None:
            return False
        if self.finish_reason not in COMPLETE_FINISH_REASONS:
            return True
        return (
            self.finish_reason == "length" and self.output_tokens is not None and self.output_tokens < self.max_tokens
        )

    @property
    def outcome(self) -> str:
        if self.ok:
            return "ok"
        if self.truncated:
            return "truncated"
        if self.status == 200 and not self.text.strip():
            return "empty"
        return "failed"

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__} | {"outcome": self.outcome}


def chat_payload(
    model: str, messages: list[dict[str, str]], max_tokens: int, temperature: float = 0.0, ignore_eos: bool = False
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        payload["ignore_eos"] = True  # vLLM's extension; engines that do not know it ignore it
    return payload


async def stream_chat(
    http: httpx.AsyncClient, api_url: str, payload: dict[str, Any], record: RequestRecord, api_key: str | None = None
) -> RequestRecord:
    """POST a streaming chat completion to `api_url` (…/v1) and fill `record`; never raises for HTTP trouble."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    record.sent_s = time.perf_counter()
    try:
        async with http.stream("POST", f"{api_url}/chat/completions", json=payload, headers=headers) as response:
            record.status = response.status_code
            if response.status_code != 200:
                record.error = (await response.aread()).decode(errors="replace")[:500]
                return record
            # SSE lines split by hand from the byte stream: httpx's aiter_lines costs ~40% more CPU per
            # request, which caps how many requests a second one core can time (benchmarks/loadtest_overhead.py)
            pending = b""
            async for chunk in response.aiter_bytes():
                *lines, pending = (pending + chunk).split(b"\n")
                if any(_consume(line.decode(), record) for line in lines):
                    break  # [DONE] ends the stream; a server may drop the connection right after it
            else:
                _consume(pending.decode(), record)
    except httpx.HTTPError as exc:  # a timeout's own text is often empty: the time it took says which wait it was
        record.error = f"{exc.__class__.__name__} after {time.perf_counter() - record.sent_s:.1f} s: {exc}"[:500]
    finally:
        record.done_s = time.perf_counter()
    return record


async def closed_loop(users: int, turn: Callable[[httpx.AsyncClient, int], Awaitable[bool]]) -> None:
    """`users` users, each on a connection of its own, each taking its next turn as soon as its last one ended, until
    its `turn(http, user_number)` returns False. The one closed loop of the kit: what a turn sends, and when the
    load ends (the requests run dry: `send_each`; a stop event, a duration), is the caller's."""

    async def user(number: int) -> None:
        async with user_client() as http:
            while await turn(http, number):
                pass

    await asyncio.gather(*(user(number) for number in range(users)))


class Prompt(Protocol):
    """One request of a closed loop: its number, what the user says, how many tokens it may answer."""

    @property
    def request_id(self) -> int: ...

    @property
    def prompt(self) -> str: ...

    @property
    def max_tokens(self) -> int: ...


async def send_each(
    target: Endpoint,
    users: int,
    requests: Sequence[Prompt],
    on_done: Callable[[RequestRecord], None] | None = None,
    temperature: float = 0.0,
    ignore_eos: bool = False,
) -> list[RequestRecord]:
    """`users` users sending `requests` in order, each the next one as soon as its last answer ended (closed_loop):
    a record per request, in the requests' order. A request's `scheduled_s` is when a user took it up (== sent_s);
    `on_done` sees each record as its answer ends."""
    records: list[RequestRecord | None] = [None] * len(requests)
    waiting = iter(enumerate(requests))

    async def turn(http: httpx.AsyncClient, user: int) -> bool:
        index, request = next(waiting, (-1, None))
        if request is None:
            return False
        record = RequestRecord(request.request_id, request.max_tokens, scheduled_s=time.perf_counter())
        messages = [{"role": "user", "content": request.prompt}]
        payload = chat_payload(target.model, messages, request.max_tokens, temperature, ignore_eos)
        records[index] = await stream_chat(http, target.base_url, payload, record, target.api_key)
        if on_done is not None:
            on_done(record)
        return True

    await closed_loop(min(users, len(requests)), turn)
    return [record for record in records if record is not None]


def _consume(line: str, record: RequestRecord) -> bool:
    """Fold one SSE line into `record`; True at `data: [DONE]`, the end of the stream."""
    if not line.startswith("data:"):
        return False
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return True
    event = json.loads(data)
    if event.get("error"):  # a server's error after the 200 was sent (vLLM: its engine died mid-answer)
        error = event["error"]
        record.error = f"error event: {error.get('message', error) if isinstance(error, dict) else error}"[:500]
    if event.get("usage"):
        record.prompt_tokens = event["usage"].get("prompt_tokens")
        record.output_tokens = event["usage"].get("completion_tokens")
    for choice in event.get("choices") or []:
        content = (choice.get("delta") or {}).get("content")
        if content:
            now = time.perf_counter()
            if record.first_token_s is None:
                record.first_token_s = now
            record.chunk_times_s.append(now)
            record.text += content
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    return False
