"""Overhead: how many requests per second the load generator sustains on ONE core, and how late it sends.

A minimal streaming server (benchmarks.stream_server, a real local socket) answers every request with a
few chunks at once; the load generator is pinned to one core (os.sched_setaffinity), the server to another
when there is one. For each offered rate (regular arrivals) it prints the achieved requests/s and the
timing error: how late requests leave against their schedule (sent - scheduled), the same number the
load test reports as `queue`. Goal: >= 500 req/s sustained with the timing error small next to the
latencies it measures (vLLM's TTFT here is tens to hundreds of ms).

    .venv/bin/python -m benchmarks.loadtest_overhead [--rates 250,500,1000] [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

from client.endpoint import Endpoint
from labs.loadtest.aggregate import Summary, summarize
from labs.loadtest.runner import run_load
from labs.loadtest.workload import WorkloadSpec, parse_lengths
from serve.config.paths import ROOT
from serve.processes.process import free_port
from ui.cli import KitArgumentParser, positive_float, positive_int

GOAL_REQUESTS_PER_S = 500.0
SUSTAINED_FRACTION = 0.95  # achieved >= 95% of offered counts as sustained
TIMING_ERROR_BUDGET_MS = 10.0  # p99 lateness allowed: a tenth of a fast TTFT on this machine
LOAD_CORE, SERVER_CORE = 0, 1
SERVER_START_TIMEOUT_S = 10.0
MS_PER_S = 1000.0


def start_server(port: int) -> subprocess.Popen[bytes]:
    cores = os.sched_getaffinity(0)
    pin = ["--cpu", str(SERVER_CORE)] if SERVER_CORE in cores and len(cores) > 1 else []
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.stream_server", "--port", str(port), *pin],
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    sys.exit("error: the stream server did not start")


def measure(target: Endpoint, spec: WorkloadSpec) -> tuple[float, Summary, float]:
    cpu_before_s = time.process_time()
    result = asyncio.run(run_load(target, spec, scrape_interval_s=None))
    cpu_ms_per_request = (time.process_time() - cpu_before_s) * MS_PER_S / spec.num_requests
    summary = summarize(result.records)
    return summary.request_throughput_per_s, summary, cpu_ms_per_request


def main() -> int:
    parser = KitArgumentParser(
        prog="python -m benchmarks.loadtest_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rates", default="250,500,1000", help="offered rates, req/s")
    parser.add_argument("--seconds", type=positive_float, default=4.0, help="length of each load point")
    parser.add_argument("--tokens", type=positive_int, default=8, help="chunks per answer")
    args = parser.parse_args()
    os.sched_setaffinity(0, {LOAD_CORE})
    port = free_port()
    server = start_server(port)
    target = Endpoint("stream-server", f"http://127.0.0.1:{port}/v1", "fake-stream")
    lengths = parse_lengths(f"fixed:{args.tokens}")
    print(f"load generator pinned to core {LOAD_CORE}; {args.tokens} chunks per answer; {args.seconds:g} s per point")
    best_sustained = best_achieved = worst_error_ms = 0.0  # the highest offered rate kept up with
    try:
        measure(target, WorkloadSpec(num_requests=50, rate_rps=None, concurrency=8, lengths=lengths))  # warm-up
        for rate in (float(part) for part in args.rates.split(",")):
            spec = WorkloadSpec(
                num_requests=int(rate * args.seconds), rate_rps=rate, arrival="regular", lengths=lengths
            )
            achieved, summary, cpu_ms = measure(target, spec)
            sustained = achieved >= SUSTAINED_FRACTION * rate and summary.num_failed == 0
            if sustained and summary.queue_ms.p99 <= TIMING_ERROR_BUDGET_MS and rate > best_sustained:
                best_sustained, best_achieved, worst_error_ms = rate, achieved, summary.queue_ms.p99
            print(
                f"offered {rate:7.0f} req/s  achieved {achieved:7.1f} req/s  ok {summary.num_ok:5d}/"
                f"{summary.num_requests}  timing error (sent - scheduled) p50 {summary.queue_ms.median:6.2f} ms "
                f"p99 {summary.queue_ms.p99:7.2f} ms  TTFT p50 {summary.ttft_ms.median:6.2f} ms  "
                f"CPU {cpu_ms:.2f} ms/request  {'sustained' if sustained else 'NOT sustained'}",
                flush=True,
            )
        closed = WorkloadSpec(
            num_requests=int(GOAL_REQUESTS_PER_S * args.seconds), rate_rps=None, concurrency=32, lengths=lengths
        )
        achieved, summary, cpu_ms = measure(target, closed)
        print(f"closed loop, 32 users: {achieved:7.1f} req/s (the ceiling), CPU {cpu_ms:.2f} ms/request")
    finally:
        server.terminate()
        server.wait()
    verdict = best_sustained >= GOAL_REQUESTS_PER_S
    print(
        f"sustained on one core: {best_sustained:.0f} req/s offered, {best_achieved:.1f} achieved, timing error "
        f"p99 {worst_error_ms:.2f} ms "
        f"(goal >= {GOAL_REQUESTS_PER_S:.0f} req/s, error p99 <= {TIMING_ERROR_BUDGET_MS:g} ms): "
        f"{'met' if verdict else 'NOT met'}"
    )
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
