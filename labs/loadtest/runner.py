"""SENDING: play a scheduled workload against one endpoint, recording every request and /metrics over time.

Requests go out through client/stream.py (the one timing implementation): a closed loop's users are its
`send_each`, the kit's one closed loop; planned (open-loop) arrivals are this module's own mode. /metrics is read
through serve/processes/metrics.py. Client-side queueing (a concurrency cap on planned arrivals) happens between
`scheduled_s` and `sent_s`, so it never hides inside the server's latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from client.endpoint import Endpoint
from client.stream import RequestRecord, chat_payload, send_each, stream_chat, tls, user_client
from labs.loadtest.workload import ScheduledRequest, WorkloadSpec, schedule
from serve.processes.metrics import MetricsSnapshot, NoMetrics, combine, scrape, scrape_async

SCRAPE_INTERVAL_S = 0.5
SCRAPE_TIMEOUT_S = 2.0


class Lanes:
    """One keep-alive connection per request in flight, at most `cap`; a request waits here for a free one.

    A single httpx client shares one pool, which scans every connection for each request: at hundreds of
    requests per second that costs more CPU than the requests. A client per lane (client/stream.user_client) keeps
    each lookup O(1).
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._free: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
        self._clients: list[httpx.AsyncClient] = []

    async def acquire(self) -> httpx.AsyncClient:
        if self._free.empty() and len(self._clients) < self.cap:
            self._clients.append(user_client())
            return self._clients[-1]
        return await self._free.get()

    def release(self, client: httpx.AsyncClient) -> None:
        self._free.put_nowait(client)

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


@dataclass(slots=True)
class RunResult:
    target: Endpoint
    spec: WorkloadSpec
    records: list[RequestRecord]
    snapshots: list[MetricsSnapshot] = field(default_factory=list)
    metrics_note: str | None = None  # why there is no /metrics series, when there is none
    started_s: float = 0.0  # perf_counter at the run's start: every series is plotted relative to it
    # behind the kit's router: requests each replica finished during the run (its vllm:request_success_total
    # before and after; the router names no replica per request, so this is per run, not per request)
    served_by_replica: dict[str, float] = field(default_factory=dict)


async def sample_metrics(
    target: Endpoint, result: RunResult, stop: asyncio.Event, interval_s: float = SCRAPE_INTERVAL_S
) -> None:
    """Scrape /metrics every interval until `stop`; an engine without /metrics is noted, not an error.

    The reads run on the event loop, each within SCRAPE_TIMEOUT_S in all: a read that takes longer is left out of
    the series (and counted in the run's note) and the next one goes out on time, so one stalled read never
    leaves a gap as long as the run.
    """
    urls = list(target.replica_urls) or [target.root_url]  # the router's own port has no vLLM /metrics
    late = 0
    async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S) as http:
        while not stop.is_set():
            try:
                reads = asyncio.gather(*(scrape_async(http, url) for url in urls))
                result.snapshots.append(combine(await asyncio.wait_for(reads, SCRAPE_TIMEOUT_S)))
            except NoMetrics as exc:
                result.metrics_note = str(exc)
                return
            except (TimeoutError, httpx.TimeoutException):
                late += 1
            except httpx.HTTPError as exc:
                result.metrics_note = f"/metrics unreadable at {target.root_url}: {exc.__class__.__name__}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
    if late and result.metrics_note is None:
        result.metrics_note = (
            f"{late} of {late + len(result.snapshots)} /metrics reads took over {SCRAPE_TIMEOUT_S:g} s and are not"
            " in the series"
        )


def finished_by_replica(target: Endpoint) -> dict[str, float]:
    """Each replica's finished-request counter now; a replica that does not answer is left out."""
    counts = {}
    for url in target.replica_urls:
        try:
            counts[url] = scrape(url, SCRAPE_TIMEOUT_S).requests_done_total
        except (httpx.HTTPError, NoMetrics):
            continue
    return counts


async def run_load(
    target: Endpoint,
    spec: WorkloadSpec,
    on_done: Callable[[RequestRecord], None] | None = None,
    scrape_interval_s: float | None = SCRAPE_INTERVAL_S,
) -> RunResult:
    """Send the whole scheduled workload and return every record; never raises for an engine's failures. A closed
    loop (no rate) is `spec.concurrency` users of client/stream.send_each; a rate plans each arrival (open loop)."""
    scheduled = schedule(spec)
    closed = spec.concurrency is not None and spec.closed_loop
    tls()  # built before the clock starts
    lanes = None if closed else Lanes(spec.concurrency or spec.num_requests)
    result = RunResult(target, spec, records=[], started_s=time.perf_counter())
    finished_before = await asyncio.to_thread(finished_by_replica, target)
    stop = asyncio.Event()
    sampler = (
        asyncio.create_task(sample_metrics(target, result, stop, scrape_interval_s)) if scrape_interval_s else None
    )
    try:
        if lanes is None:
            users = spec.concurrency or 1
            result.records = await send_each(target, users, scheduled, on_done, spec.temperature, spec.ignore_eos)
        else:
            result.records = await open_loop(target, spec, scheduled, lanes, result.started_s, on_done)
    finally:
        stop.set()
        if sampler is not None:
            await sampler
    after = await asyncio.to_thread(finished_by_replica, target)
    result.served_by_replica = {url: after[url] - finished_before.get(url, 0.0) for url in after}
    return result


async def open_loop(
    target: Endpoint,
    spec: WorkloadSpec,
    scheduled: list[ScheduledRequest],
    lanes: Lanes,
    started_s: float,
    on_done: Callable[[RequestRecord], None] | None,
) -> list[RequestRecord]:
    """Each request sent at its planned arrival (`started_s` + its offset), through `lanes` (at most
    `spec.concurrency` in flight)."""

    async def send(request: ScheduledRequest) -> RequestRecord:
        scheduled_s = started_s + request.offset_s
        await asyncio.sleep(max(0.0, scheduled_s - time.perf_counter()))
        http = await lanes.acquire()
        record = RequestRecord(request.request_id, request.max_tokens, scheduled_s)
        messages = [{"role": "user", "content": request.prompt}]
        payload = chat_payload(target.model, messages, request.max_tokens, spec.temperature, spec.ignore_eos)
        try:
            await stream_chat(http, target.base_url, payload, record, target.api_key)
        finally:
            lanes.release(http)
        if on_done is not None:
            on_done(record)
        return record

    try:
        return list(await asyncio.gather(*(send(request) for request in scheduled)))
    finally:
        await lanes.aclose()
