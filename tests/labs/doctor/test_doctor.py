"""The /metrics doctor's command: V0 text over HTTP, a real burst, and engines without metrics
(rules: test_diagnosis.py).

Real first: the burst test saturates the session's real vLLM (more requests than MAX_NUM_SEQS) and watches
the diagnosis go idle -> slot-bound -> idle. KV pressure and preemptions cannot be produced on demand on a
46k-token pool with 2 cores, and V0 (the openEuler image) is not installed here: for those, V0_TEXT below is
exposition text written by this project in vLLM 0.9.1's format, served by a real HTTP server.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve.config.vllm_flags import API_SERVER_MODULE
from serve.processes.metrics import MetricsSnapshot, NoMetrics, scrape
from serve.processes.process import PidFile
from tests.conftest import ROOT, Server, busiest_processes, kit_env
from tests.labs.doctor.test_diagnosis import v0_text
from tests.support.docs import doc_commands, doc_examples, retarget, run_doc, shows
from tests.support.load import Load, closed_loop
from tests.support.loopback import loopback_server

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BURST_USERS = 64  # twice the session server's MAX_NUM_SEQS (32 on 2 cores), so half of them wait
BURST_MAX_TOKENS = 512
BURST_ROUNDS = 100  # requests per user: more than the test ever waits for (it cancels the rest)
SATURATION_TIMEOUT_S = 180.0  # two of the burst's 512-token rounds on a slow AVX2 machine
POLL_S = 0.25
WATCH_TRIES = 3
UNDER_LOAD_TIMEOUT_S = 240  # the doctor while the burst saturates the machine


@contextmanager
def http_server(metrics_text: str | None, status: int = 200) -> Iterator[str]:
    """A real HTTP server: /metrics answers `metrics_text` with `status`, or 404 like Ollama and llama.cpp's."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/metrics" and metrics_text is not None
            body = (metrics_text if found else "404 page not found").encode()
            self.send_response(status if found else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with loopback_server(Handler) as url:
        yield url


# An engine the kit did not start has no record of its KV budget, and V0's names carry none: the doctor names the
# lever without a number and says where its limits came from (what the engine reports), never from .env.
NOT_STARTED_BY_THE_KIT = "from what the engine reports (/metrics vllm:cache_config_info, /v1/models): no record"


def doctor(*args: str, timeout_s: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """The doctor as a user runs it; timeout_s only catches a hang (it is not a speed goal)."""
    return subprocess.run(
        [sys.executable, "-m", "labs.doctor", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=kit_env(**env),
        timeout=timeout_s,
    )


def test_an_engine_without_metrics_gets_one_clear_line() -> None:
    with http_server(None) as url:
        with pytest.raises(NoMetrics):
            scrape(url)
        result = doctor("--url", f"{url}/v1", "--samples", "1")
    assert result.returncode == 3
    assert result.stdout.startswith("this engine exposes no metrics") and "Traceback" not in result.stderr


def test_command_reads_v0_text_over_http_and_names_the_lever() -> None:
    with http_server(v0_text(running=16, waiting=5, kv=0.97)) as url:
        result = doctor("--url", url, "--samples", "2", "--interval-s", "0.1", VLLM_CPU_KVCACHE_SPACE="1")
    assert result.returncode == 0, result.stderr
    assert "vLLM V0 names" in result.stdout and "97.0%" in result.stdout
    assert "1456 blocks of 16" in result.stdout
    assert "raise VLLM_CPU_KVCACHE_SPACE (or" in result.stdout  # .env's 1 GiB is not the engine's: no number
    assert NOT_STARTED_BY_THE_KIT in " ".join(result.stdout.split())
    assert "SWAP_SPACE adds no blocks on CPU" in result.stdout


def test_watch_on_a_terminal_redraws_a_live_table() -> None:
    """Under a real pseudo-terminal (util-linux `script`), --watch redraws in place instead of scrolling."""
    with http_server(v0_text(running=16, waiting=5, kv=0.97)) as url:
        command = f"{sys.executable} -m labs.doctor --url {url} --watch --duration-s 1.2 --interval-s 0.5"
        result = subprocess.run(
            ["script", "-qec", command, "/dev/null"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**kit_env(), "COLUMNS": "120"},
            timeout=60,
        )
    assert result.returncode == 0, result.stdout
    assert "\x1b[1A" in result.stdout  # cursor-up: the table is redrawn where it was
    assert result.stdout.count("every 0.5 s (Ctrl-C stops)") >= 3
    assert "raise VLLM_CPU_KVCACHE_SPACE" in result.stdout
    assert "-> kv" not in result.stdout  # the plain line-per-sample form is for pipes only


def test_watch_plots_the_timeline(tmp_path: Path) -> None:
    with http_server(v0_text(running=16, waiting=5, kv=0.97)) as url:
        result = doctor(
            "--url",
            url,
            "--watch",
            "--duration-s",
            "0.8",
            "--interval-s",
            "0.3",
            "--plot",
            str(tmp_path / "plots" / "timeline.png"),
        )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "plots" / "timeline.png").read_bytes().startswith(PNG_MAGIC)
    assert f"written to {tmp_path / 'plots' / 'timeline.png'}" in result.stdout


def test_a_failing_metrics_endpoint_is_not_called_metric_less() -> None:
    with http_server("engine overloaded", status=500) as url:
        result = doctor("--url", url, "--samples", "1")
    assert result.returncode == 1 and "HTTPStatusError" in result.stderr
    assert "exposes no metrics" not in result.stdout + result.stderr


def test_an_unreachable_engine_is_one_line_exit_1() -> None:
    with http_server(None) as url:
        pass  # closed: nothing listens there now
    result = doctor("--url", url)
    assert result.returncode == 1 and result.stderr.startswith("error: cannot read")


# --- The real server under a real burst ------------------------------------------------------------------


def running_engine(server: Server) -> tuple[list[str], dict[str, str]]:
    """The live server's own command line and environment: what it really runs with, read from the process
    rather than recomputed with the kit's resolve() (which the doctor itself uses)."""
    pid = PidFile(ROOT / ".kit" / "run" / f"vllm-{server.port}.pid", API_SERVER_MODULE).live_pid()
    assert pid is not None, f"no live server behind port {server.port}"
    engine = psutil.Process(pid)
    return engine.cmdline(), engine.environ()


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def served_max_num_seqs(server: Server) -> int:
    """--max-num-seqs on the session server's command line (auto: 16 per core)."""
    return int(flag_value(running_engine(server)[0], "--max-num-seqs"))


def served_cache_config(server: Server) -> dict[str, str]:
    """vLLM's own vllm:cache_config_info labels, parsed here with prometheus_client alone."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    [family] = [family for family in text_string_to_metric_families(text) if family.name == "vllm:cache_config_info"]
    return family.samples[0].labels


async def saturate(server: Server, plot: Path) -> tuple[MetricsSnapshot, str, str]:
    """Keep BURST_USERS long streams going; once some wait, run the doctor (one-shot and watch), then cancel.

    Each user sends its next request as soon as one ends, so the batch stays full however long the doctor
    takes to start: a CI run under load once saw both doctor runs start after a one-off burst had drained.
    Each doctor run starts once the gauges say the batch is full; a watch that still caught none of it (a CI
    run's three samples all read 1 running, 31 waiting while the starved test process read 32 finished
    streams) is run again, WATCH_TRIES times at most.
    """
    seqs = served_max_num_seqs(server)
    assert seqs < BURST_USERS, f"the burst must outnumber MAX_NUM_SEQS={seqs}"
    prompts = [f"Story {i}: tell me a long tale about the number {i}." for i in range(BURST_USERS)]

    async def full(load: Load) -> MetricsSnapshot:
        deadline = time.monotonic() + SATURATION_TIMEOUT_S
        while True:
            snapshot = await asyncio.to_thread(scrape, server.base_url)
            if snapshot.waiting > 0 and snapshot.running >= seqs:
                return snapshot
            if time.monotonic() > deadline:  # what the server, the clients and the machine looked like
                pytest.fail(
                    f"no request waited beside a full batch within {SATURATION_TIMEOUT_S} s: the server read "
                    f"{snapshot.running:g} running, {snapshot.waiting:g} waiting {snapshot.waiting_by_reason}, "
                    f"KV {snapshot.kv_usage}; {load.summary()}\n{busiest_processes()}"
                )
            await asyncio.sleep(POLL_S)

    async with closed_loop(server, BURST_USERS, prompts, BURST_MAX_TOKENS, BURST_ROUNDS) as load:
        snapshot = await full(load)
        one_shot = await asyncio.to_thread(
            doctor, "--url", server.base_url, "--samples", "2", "--interval-s", "0.5", timeout_s=UNDER_LOAD_TIMEOUT_S
        )
        for _ in range(WATCH_TRIES):
            await full(load)
            watch = await asyncio.to_thread(
                doctor,
                "--url",
                server.base_url,
                "--watch",
                "--duration-s",
                "2",
                "--interval-s",
                "0.5",
                "--plot",
                str(plot),
                timeout_s=UNDER_LOAD_TIMEOUT_S,
            )
            if f"running {seqs} " in watch.stdout:
                break
    assert not load.failures, load.summary()
    return snapshot, one_shot.stdout, watch.stdout


def wait_idle(server: Server, timeout_s: float = 60) -> MetricsSnapshot:
    deadline = time.monotonic() + timeout_s
    while True:
        snapshot = scrape(server.base_url)
        if (snapshot.running, snapshot.waiting) == (0, 0) or time.monotonic() > deadline:
            return snapshot
        time.sleep(POLL_S)


@pytest.mark.server
@pytest.mark.slow
def test_real_burst_moves_the_gauges_and_the_diagnosis_follows(vllm_server: Server, tmp_path: Path) -> None:
    wait_idle(vllm_server)
    before = doctor("--url", vllm_server.base_url, "--samples", "1")
    assert before.returncode == 0 and "diagnosis: idle" in before.stdout, before.stdout

    snapshot, one_shot, watch = asyncio.run(saturate(vllm_server, tmp_path / "timeline.png"))
    seqs = served_max_num_seqs(vllm_server)
    assert snapshot.running == seqs  # the batch is full ...
    assert snapshot.waiting > 0 and snapshot.waiting_by_reason.get("capacity", 0) > 0  # ... so the rest wait
    assert snapshot.kv_usage is not None and 0 < snapshot.kv_usage < 0.5  # with the KV pool nearly empty
    assert "diagnosis: slot-bound" in one_shot and f"raise MAX_NUM_SEQS from {seqs} to" in one_shot, one_shot
    assert f"running {seqs}" in watch and "-> slots" in watch, watch
    assert (tmp_path / "timeline.png").read_bytes().startswith(PNG_MAGIC) and "timeline of" in watch

    after = wait_idle(vllm_server)
    assert (after.running, after.waiting) == (0, 0), "cancelled requests still run"
    assert "diagnosis: idle" in doctor("--url", vllm_server.base_url, "--samples", "1").stdout


# --- The lab page's commands ------------------------------------------------------------------------------

PAGE = "labs/metrics.md"


@pytest.mark.server
@pytest.mark.slow
def test_page_no_metrics_command_on_the_real_llamacpp_server(llamacpp_server: Server) -> None:
    """The Ollama-class engine the kit runs (llama.cpp's server) has no /metrics: one line, exit 3."""
    (command,) = [command for command in doc_commands(PAGE) if "11434" in command]
    result = run_doc(retarget(command, {11434: llamacpp_server.port}), kit_env(), timeout_s=60)
    assert result.returncode == 3, result.stdout + result.stderr
    shown = [retarget(line, {11434: llamacpp_server.port}) for line in doc_examples(PAGE)[command]]
    assert not shows(result.stdout, shown), result.stdout


@pytest.mark.server
@pytest.mark.slow
def test_page_commands_against_the_real_server(vllm_server: Server) -> None:
    one_look, burst, watch = [command for command in doc_commands(PAGE) if "11434" not in command]
    env = vllm_server.client_env()
    wait_idle(vllm_server)
    idle = run_doc(retarget(one_look, {8009: vllm_server.port}), env, timeout_s=60)
    assert idle.returncode == 0 and "diagnosis: idle" in idle.stdout, idle.stdout + idle.stderr
    argv, environ = running_engine(vllm_server)
    cache = served_cache_config(vllm_server)  # the engine's own account of its pool
    blocks, block_size, kv_gib = (
        int(cache["num_gpu_blocks"]),
        int(cache["block_size"]),
        environ["VLLM_CPU_KVCACHE_SPACE"],
    )
    assert block_size == int(flag_value(argv, "--block-size"))
    assert "vLLM V1 names" in idle.stdout
    line = f"{blocks} blocks of {block_size} = {blocks * block_size:,} tokens ({kv_gib} GiB)"
    assert line in idle.stdout, idle.stdout

    busy = run_doc(retarget(burst, {8009: vllm_server.port}), env, timeout_s=300)
    assert busy.returncode == 0, busy.stdout + busy.stderr
    seqs = int(flag_value(argv, "--max-num-seqs"))
    assert "diagnosis: slot-bound" in busy.stdout and f"raise MAX_NUM_SEQS from {seqs} to" in busy.stdout, busy.stdout

    wait_idle(vllm_server)
    watched = run_doc(retarget(watch, {8009: vllm_server.port}), env, timeout_s=60)
    assert watched.returncode == 0 and watched.stdout.count("-> idle") >= 3, watched.stdout
