"""A replica restarts on its own CPUs and gets every CPU back once up: the kit's supervisor, with a real child.

MKL (in torch) counts the cores at import by moving its process onto each CPU in turn; under load, a CPU the other
replica's model keeps busy held that move for minutes. The child here is a small HTTP server in plain Python (no
torch: what is under test is what the supervisor does to a child's CPUs, not MKL): it notes the CPUs it started
with and answers /health and /cpus; the supervisor starts and restarts it the way it does vLLM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from serve.processes.supervisor import own_cpus
from tests.conftest import ROOT, free_port
from tests.support.waiting import wait_until

CHILD = """
import http.server, json, os, sys
started_on = sorted(os.sched_getaffinity(0))
class Answer(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args): pass
    def do_GET(self):
        body = json.dumps({"started_on": started_on, "now": sorted(os.sched_getaffinity(0))}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Answer).serve_forever()
"""
CPUS = sorted(os.sched_getaffinity(0))


def test_own_cpus_reads_one_workers_list_and_nothing_else() -> None:
    assert own_cpus(str(CPUS[0])) == ({CPUS[0]} if len(CPUS) > 1 else None)  # all of them: nothing to confine
    assert own_cpus(f"{CPUS[0]}-{CPUS[-1]}") is None
    for word in ("auto", "nobind", "all", "", "0|1"):
        assert own_cpus(word) is None, word


def healthy_runs(events: Path) -> list[int]:
    """The pids the supervisor saw healthy, in order."""
    if not events.exists():
        return []
    return [event["pid"] for event in json.loads(events.read_text())["events"] if event["kind"] == "healthy"]


@pytest.mark.skipif(len(CPUS) < 2, reason="a machine with one CPU has no other CPU to keep a replica off")
def test_a_bound_server_restarts_on_its_cpus_and_gets_every_cpu_once_healthy(tmp_path: Path) -> None:
    port, own, events = free_port(), CPUS[-1], tmp_path / "events.json"
    supervisor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serve.processes.supervisor",
            "--label",
            "stand-in replica",
            "--health-url",
            f"http://127.0.0.1:{port}/health",
            "--log",
            str(tmp_path / "server.log"),
            "--record",
            str(events),
            "--",
            sys.executable,
            "-c",
            CHILD,
            str(port),
        ],
        cwd=ROOT,
        env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": str(own)},
        start_new_session=True,
    )
    try:
        wait_until(lambda: len(healthy_runs(events)) == 1, 60, "the supervisor to see it up")
        first = httpx.get(f"http://127.0.0.1:{port}/cpus", timeout=10).json()
        os.kill(healthy_runs(events)[0], signal.SIGKILL)
        wait_until(lambda: len(healthy_runs(events)) == 2, 60, "the supervisor to restart it and see it up")
        again = httpx.get(f"http://127.0.0.1:{port}/cpus", timeout=10).json()
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        supervisor.wait(timeout=30)
    assert first == {"started_on": CPUS, "now": CPUS}, first  # the first start: the other replicas are idle
    assert again == {"started_on": [own], "now": CPUS}, again
