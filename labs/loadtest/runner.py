"""SENDING: play a scheduled workload against one endpoint, recording every request and /metrics over time.

Requests go out through client/stream.py (the one timing implementation); /metrics is read through
serve/processes/metrics.py. Client-side queueing (a closed loop's users, a concurrency cap) happens between
`scheduled_s` and `sent_s`, so it never hides inside the server's latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from client.endpoint import Endpoint
from client.stream import STREAM_TIMEOUT, RequestRecord, chat_payload, stream_chat
from labs.loadtest.workload import ScheduledRequest, WorkloadSpec, schedule
from serve.processes.metrics import MetricsSnapshot, NoMetrics, combine, scrape, scrape_async

SCRAPE_INTERVAL_S = 0.5
SCRAPE_TIMEOUT_S = 2.0


class Lanes:
    """One keep-alive connection per request in flight, at most `cap`; a request waits here for a free one.

    A single httpx client shares one pool, which scans every connection for each request: at hundreds of
    requests per second that costs more CPU than the requests. A client per lane keeps each lookup O(1).
    """

    def __init__(self, cap: int, timeout: httpx.Timeout) -> None:
        self.cap = cap
        self._timeout = timeout
        self._free: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
        self._clients: list[httpx.AsyncClient] = []
        self._tls = ssl.create_default_context()  # built once: building one per client costs milliseconds

    async def acquire(self) -> httpx.AsyncClient:
        if self._free.empty() and len(self._clients) < self.cap:
            limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
            self._clients.append(httpx.AsyncClient(limits=limits, timeout=self._timeout, verify=self._tls))
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
    """Send the whole scheduled workload and return every record; never raises for an engine's failures."""
    scheduled = schedule(spec)
    lanes = Lanes(spec.concurrency or spec.num_requests, STREAM_TIMEOUT)
    result = RunResult(target, spec, records=[], started_s=time.perf_counter())
    finished_before = await asyncio.to_thread(finished_by_replica, target)
    stop = asyncio.Event()
    sampler = (
        asyncio.create_task(sample_metrics(target, result, stop, scrape_interval_s)) if scrape_interval_s else None
    )

    async def send(request: ScheduledRequest) -> RequestRecord:
        scheduled_s = result.started_s + request.offset_s
        await asyncio.sleep(max(0.0, scheduled_s - time.perf_counter()))
        http = await lanes.acquire()
        record = RequestRecord(
            request.request_id, request.max_tokens, time.perf_counter() if spec.closed_loop else scheduled_s
        )
        payload = chat_payload(
            target.model,
            [{"role": "user", "content": request.prompt}],
            request.max_tokens,
            spec.temperature,
            spec.ignore_eos,
        )
        try:
            await stream_chat(http, target.base_url, payload, record, target.api_key)
        finally:
            lanes.release(http)
        if on_done is not None:
            on_done(record)
        return record

    try:
        result.records = list(await asyncio.gather(*(send(request) for request in scheduled)))
    finally:
        stop.set()
        if sampler is not None:
            await sampler
        await lanes.aclose()
    after = await asyncio.to_thread(finished_by_replica, target)
    result.served_by_replica = {url: after[url] - finished_before.get(url, 0.0) for url in after}
    return result
