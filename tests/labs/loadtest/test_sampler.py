"""The load tester's /metrics sampler when one read stalls: a FAULT the real vLLM cannot produce on demand.

A real engine's /metrics answers in milliseconds; on a shared 2-core machine one read once produced nothing for 16 s
of a 16 s run and the series came back empty. The stand-in below answers vLLM's V1 gauges, except that its second
read hangs for longer than the sampler waits.
"""

from __future__ import annotations

import asyncio
import time
from http.server import BaseHTTPRequestHandler

from client.endpoint import Endpoint
from labs.loadtest.runner import SCRAPE_TIMEOUT_S, RunResult, sample_metrics
from labs.loadtest.workload import WorkloadSpec
from tests.support.loopback import loopback_server

METRICS = b"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""
STALL_S = SCRAPE_TIMEOUT_S + 3


class StallsOnce(BaseHTTPRequestHandler):
    reads = 0

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        type(self).reads += 1
        if type(self).reads == 2:
            time.sleep(STALL_S)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(METRICS)))
        self.end_headers()
        self.wfile.write(METRICS)


def test_a_stalled_read_is_left_out_and_said_and_the_series_goes_on() -> None:
    with loopback_server(StallsOnce) as root:
        target = Endpoint(name="stand-in", base_url=f"{root}/v1", model="m")
        result = RunResult(target, WorkloadSpec(), records=[], started_s=time.perf_counter())

        async def run_for(seconds: float) -> None:
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_metrics(target, result, stop, interval_s=0.1))
            await asyncio.sleep(seconds)
            stop.set()
            await sampler

        asyncio.run(run_for(SCRAPE_TIMEOUT_S + 1.5))

    taken = [snapshot.taken_s - result.started_s for snapshot in result.snapshots]
    # the first read, then the stalled one given up after SCRAPE_TIMEOUT_S, then reads every 0.1 s again
    assert len(taken) >= 3 and all(snapshot.running == 3.0 for snapshot in result.snapshots), taken
    assert taken[1] - taken[0] < SCRAPE_TIMEOUT_S + 1, taken
    assert result.metrics_note == f"1 of {1 + len(taken)} /metrics reads took over 2 s and are not in the series"
