"""The /metrics doctor: V0 and V1 names, the course's diagnosis rules, a real burst, and engines without metrics.

Real first: the burst test saturates the session's real vLLM (more requests than MAX_NUM_SEQS) and watches
the diagnosis go idle -> slot-bound -> idle. KV pressure and preemptions cannot be produced on demand on a
46k-token pool with 2 cores, and V0 (the openEuler image) is not installed here: for those, V0_TEXT below is
exposition text written by this project in vLLM 0.9.1's format, served by a real HTTP server.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from labs.common.metrics import MetricsSnapshot, NoMetrics, parse, scrape
from labs.doctor.diagnosis import Limits, diagnose
from serve.process import PidFile
from serve.vllm_command import API_SERVER_MODULE
from tests.conftest import ROOT, Server, kit_env
from tests.support.docs import doc_commands, doc_examples, retarget, run_doc, shows
from tests.support.load import closed_loop

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LIMITS = Limits(max_num_seqs=16, max_model_len=1024, kv_cache_space_gib=1)
BURST_USERS = 32  # twice the session server's MAX_NUM_SEQS (16 on 2 cores), so half of them wait
BURST_MAX_TOKENS = 512
BURST_ROUNDS = 100  # requests per user: more than the test ever waits for (it cancels the rest)
SATURATION_TIMEOUT_S = 90.0
POLL_S = 0.25
UNDER_LOAD_TIMEOUT_S = 240  # the doctor while the burst saturates the machine


def v0_text(running: float = 0, waiting: float = 0, kv: float = 0.0, preemptions: float = 0) -> str:
    """Project-written exposition text in vLLM 0.9.1 (V0) format: gpu_cache_usage_perc, swap in the config."""
    labels = 'model_name="HuggingFaceTB/SmolLM2-135M-Instruct"'
    return f"""# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",cache_dtype="auto",cpu_offload_gb="0",enable_prefix_caching="False",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="0",num_gpu_blocks="1456",num_gpu_blocks_override="None",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"}} 1.0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} {running}
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{{{labels}}} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{labels}}} {waiting}
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{{labels}}} {kv}
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{{{labels}}} 0.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{labels}}} {preemptions}
"""


V1_DEFERRED_TEXT = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1
"""


def test_v0_names_are_understood() -> None:
    snapshot = parse(v0_text(running=4, waiting=2, kv=0.5, preemptions=3))
    assert snapshot.format == "v0"
    assert (snapshot.running, snapshot.waiting, snapshot.kv_usage, snapshot.preemptions_total) == (4, 2, 0.5, 3)
    assert snapshot.cache_config["num_gpu_blocks"] == "1456" and snapshot.cache_config["swap_space"] == "4"


def test_v0_kv_pressure_says_raise_the_kv_budget_and_not_swap() -> None:
    history = [parse(v0_text(16, 2, 0.95, 3)), parse(v0_text(16, 6, 0.98, 3))]
    diagnosis = diagnose(history, LIMITS)
    assert (diagnosis.state, diagnosis.lever) == ("kv", "VLLM_CPU_KVCACHE_SPACE")
    assert "6 waiting (rising) with KV usage 98%" in diagnosis.advice
    assert "raise VLLM_CPU_KVCACHE_SPACE from 1 to 2" in diagnosis.advice
    assert "lower MAX_MODEL_LEN from 1024 to 512" in diagnosis.advice
    assert any("SWAP_SPACE adds no blocks on CPU" in note for note in diagnosis.notes)
    assert any("swap_space=4 GiB: that reserves swap, not KV blocks" in note for note in diagnosis.notes)


def test_v0_rising_preemptions_are_kv_pressure_even_with_nothing_waiting() -> None:
    diagnosis = diagnose([parse(v0_text(8, 0, 0.7, 3)), parse(v0_text(8, 0, 0.72, 5))], LIMITS)
    assert diagnosis.state == "kv" and "2 preemption(s) while sampling" in diagnosis.advice


def test_v0_waiting_with_low_kv_says_raise_max_num_seqs() -> None:
    diagnosis = diagnose([parse(v0_text(16, 4, 0.2)), parse(v0_text(16, 8, 0.21))], LIMITS)
    assert (diagnosis.state, diagnosis.lever) == ("slots", "MAX_NUM_SEQS")
    assert "8 waiting (rising) while KV usage is only 21%" in diagnosis.advice
    assert "raise MAX_NUM_SEQS from 16 to 24" in diagnosis.advice


def test_waiting_with_free_slots_and_low_kv_is_prefill_not_max_num_seqs() -> None:
    diagnosis = diagnose([parse(v0_text(5, 9, 0.36)), parse(v0_text(5, 9, 0.37))], LIMITS)
    assert (diagnosis.state, diagnosis.lever) == ("prefill", None)
    assert "5 of MAX_NUM_SEQS=16 slots in use" in diagnosis.advice and "--max-num-batched-tokens" in diagnosis.advice
    assert diagnose([parse(v0_text(5, 9, 0.36))], Limits()).state == "slots"  # MAX_NUM_SEQS unknown


@pytest.mark.parametrize(("text", "state"), [(v0_text(), "idle"), (v0_text(running=3, kv=0.1), "busy"),
                                             (V1_DEFERRED_TEXT, "deferred")])
def test_idle_busy_and_deferred(text: str, state: str) -> None:
    diagnosis = diagnose([parse(text)], LIMITS)
    assert diagnosis.state == state and diagnosis.lever is None


def test_diagnose_needs_a_snapshot() -> None:
    with pytest.raises(ValueError, match="at least one snapshot"):
        diagnose([])


@contextmanager
def http_server(metrics_text: str | None, status: int = 200) -> Iterator[str]:
    """A real HTTP server: /metrics answers `metrics_text` with `status`, or 404 like Ollama and llama.cpp's."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            found = self.path == "/metrics" and metrics_text is not None
            body = (metrics_text if found else "404 page not found").encode()
            self.send_response(status if found else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def doctor(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """The doctor as a user runs it; timeout_s only catches a hang (it is not a speed goal)."""
    return subprocess.run([sys.executable, "-m", "labs.doctor", *args], capture_output=True, text=True,
                          cwd=ROOT, env=kit_env(), timeout=timeout_s)


def test_an_engine_without_metrics_gets_one_clear_line() -> None:
    with http_server(None) as url:
        with pytest.raises(NoMetrics):
            scrape(url)
        result = doctor("--url", f"{url}/v1", "--samples", "1")
    assert result.returncode == 3
    assert result.stdout.startswith("this engine exposes no metrics") and "Traceback" not in result.stderr


def test_command_reads_v0_text_over_http_and_names_the_lever() -> None:
    with http_server(v0_text(running=16, waiting=5, kv=0.97)) as url:
        result = doctor("--url", url, "--samples", "2", "--interval-s", "0.1")
    assert result.returncode == 0, result.stderr
    assert "vLLM V0 names" in result.stdout and "97.0%" in result.stdout
    assert "1456 blocks of 16" in result.stdout
    assert "raise VLLM_CPU_KVCACHE_SPACE from 1 to 2" in result.stdout
    assert "SWAP_SPACE adds no blocks on CPU" in result.stdout


def test_watch_on_a_terminal_redraws_a_live_table() -> None:
    """Under a real pseudo-terminal (util-linux `script`), --watch redraws in place instead of scrolling."""
    with http_server(v0_text(running=16, waiting=5, kv=0.97)) as url:
        command = f"{sys.executable} -m labs.doctor --url {url} --watch --duration-s 1.2 --interval-s 0.5"
        result = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True,
                                cwd=ROOT, env={**kit_env(), "COLUMNS": "120"}, timeout=60)
    assert result.returncode == 0, result.stdout
    assert "\x1b[1A" in result.stdout  # cursor-up: the table is redrawn where it was
    assert result.stdout.count("every 0.5 s (Ctrl-C stops)") >= 3
    assert "raise VLLM_CPU_KVCACHE_SPACE from 1 to 2" in result.stdout
    assert "-> kv" not in result.stdout  # the plain line-per-sample form is for pipes only


def test_watch_plots_the_timeline(tmp_path: Path) -> None:
    with http_server(v0_text(running=16, waiting=5, kv=0.97)) as url:
        result = doctor("--url", url, "--watch", "--duration-s", "0.8", "--interval-s", "0.3", "--plot",
                        str(tmp_path / "plots" / "timeline.png"))
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
    """--max-num-seqs on the session server's command line (auto: 8 per core)."""
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
    """
    seqs = served_max_num_seqs(server)
    assert BURST_USERS > seqs, f"the burst must outnumber MAX_NUM_SEQS={seqs}"
    prompts = [f"Story {i}: tell me a long tale about the number {i}." for i in range(BURST_USERS)]
    async with closed_loop(server, BURST_USERS, prompts, BURST_MAX_TOKENS, BURST_ROUNDS) as failures:
        deadline = time.monotonic() + SATURATION_TIMEOUT_S
        while True:
            snapshot = await asyncio.to_thread(scrape, server.base_url)
            if snapshot.waiting > 0 and snapshot.running >= seqs:
                break
            assert time.monotonic() < deadline, f"no request waited within {SATURATION_TIMEOUT_S} s"
            await asyncio.sleep(POLL_S)
        one_shot = await asyncio.to_thread(doctor, "--url", server.base_url, "--samples", "2",
                                           "--interval-s", "0.5", timeout_s=UNDER_LOAD_TIMEOUT_S)
        watch = await asyncio.to_thread(doctor, "--url", server.base_url, "--watch", "--duration-s", "1",
                                        "--interval-s", "0.5", "--plot", str(plot), timeout_s=UNDER_LOAD_TIMEOUT_S)
    assert not failures, f"{len(failures)} burst requests failed, e.g. {failures[0].error}"
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
    blocks, block_size, kv_gib = int(cache["num_gpu_blocks"]), int(cache["block_size"]), environ["VLLM_CPU_KVCACHE_SPACE"]
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
