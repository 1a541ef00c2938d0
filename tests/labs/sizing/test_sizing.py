"""The sizing command and its predictions checked against live vLLM servers
(the arithmetic: tests/serve/config/test_sizing.py)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labs.doctor.diagnosis import HIGH_KV_USAGE
from labs.served import served
from labs.sizing.verify import compare
from serve.config.model import bundled_model_facts
from serve.config.plan import Plan
from serve.config.sizing import GiB
from serve.install.llamacpp_venv import gguf_path
from serve.processes import run_record
from serve.processes.local_server import LOG_DIR
from serve.processes.metrics import MetricsSnapshot, scrape
from tests.conftest import ROOT, Server, free_port, kit_env, start_server, stop_server
from tests.support.docs import doc_commands, doc_examples, retarget, run_doc, shows
from tests.support.learner_models import ollama_store
from tests.support.load import closed_loop


def sizing(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labs.sizing", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_command_reproduces_the_course_figure() -> None:
    result = sizing("kv", "--v0", "--dtype", "float32", "--kv-gib", "1", "--max-model-len", "1024")
    assert result.returncode == 0, result.stderr
    for expected in ("46,080", "1,456", "23,296", "22.75x"):
        assert expected in result.stdout


def test_command_refuses_a_bad_size_in_one_line() -> None:
    result = sizing("fit", "--memory", "lots")
    assert result.returncode == 2
    assert "is not a memory size" in result.stderr and "Traceback" not in result.stdout + result.stderr


def test_fit_sizes_a_model_of_the_learners_ollama_before_anything_is_prepared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--model ollama:<name>: the GGUF blob's header, as the preflight reads MODEL_PATH's (a stand-in store)."""
    ollama_store(tmp_path / "store", gguf_path())
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing prepared from it on this machine yet
    result = sizing("fit", "--model", "ollama:smollm2:135m", "--memory", "8g", "--weights", "bf16")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"smollm2:135m: 30 layers, 3 KV heads x head_dim 64, context 8192 tokens, "
        f"{bundled_model_facts().num_params:,} parameters (GGUF tensors)"
    ), result.stdout


# --- Proof against the real engine: three configurations -----------------------------------------------


def verify_server(server: Server, dtype: str, kv_gib: int) -> None:
    engine = served(server.base_url, log_path=LOG_DIR / f"vllm-{server.port}.log")
    rows = compare(bundled_model_facts(), dtype, kv_gib * GiB, engine)
    assert {row.source for row in rows} == {"/metrics", "startup log"}
    assert len(rows) == 7 and all(row.matches for row in rows), rows
    result = sizing(
        "verify",
        "--url",
        server.base_url,
        "--dtype",
        dtype,
        "--kv-gib",
        str(kv_gib),
        "--log",
        str(LOG_DIR / f"vllm-{server.port}.log"),
    )
    assert result.returncode == 0 and result.stdout.count("match") == 7, result.stdout + result.stderr


@pytest.mark.server
@pytest.mark.slow
def test_prediction_equals_the_session_server(vllm_server: Server) -> None:
    plan = started_plan(vllm_server)
    assert plan.kv_cache_space_gib is not None
    verify_server(vllm_server, plan.dtype, plan.kv_cache_space_gib)


def started_plan(server: Server) -> Plan:
    """The plan up.sh started the server with, from its record."""
    record = run_record.live(server.port)
    assert record is not None and record.plan is not None
    return record.plan


@pytest.fixture(scope="module")
def small_pool_server() -> Iterator[Server]:
    """float32 with 1 GiB: the smallest pool (23,296 tokens); 32 slots, so slots are never the limit."""
    server = start_server(
        DTYPE="float32",
        VLLM_CPU_KVCACHE_SPACE="1",
        MAX_MODEL_LEN="8192",
        MAX_NUM_SEQS="32",
        BLOCK_SIZE="128",
        ENFORCE_EAGER="true",
    )
    yield server
    stop_server(server)


@pytest.mark.server
@pytest.mark.slow
def test_prediction_equals_a_float32_8k_server(small_pool_server: Server) -> None:
    engine = served(small_pool_server.base_url)
    assert engine.max_model_len == 8192 and engine.cache_config["num_gpu_blocks"] == "182"
    verify_server(small_pool_server, "float32", 1)
    assert "admission queues on KV space" in small_pool_server.up_output  # 32 x 8192 tokens > 23,296


@pytest.mark.server
@pytest.mark.slow
def test_prediction_equals_a_bfloat16_2gib_server() -> None:
    server = start_server(
        DTYPE="bfloat16", VLLM_CPU_KVCACHE_SPACE="2", MAX_MODEL_LEN="2048", BLOCK_SIZE="128", ENFORCE_EAGER="true"
    )
    try:
        engine = served(server.base_url)
        assert engine.max_model_len == 2048 and engine.cache_config["num_gpu_blocks"] == "728"
        verify_server(server, "bfloat16", 2)
        assert "admission queues on KV space" not in server.up_output  # 16 x 2048 tokens fit in 93,184
    finally:
        stop_server(server)


FILL_USERS = 14
FILL_WORDS = 1800  # ~2,000 prompt tokens each: 14 of them (28k) overflow the 23,296-token pool
FILL_MAX_TOKENS = 4096  # answers grow until the pool is full and stay there: nothing ends while the test samples
FILL_ROUNDS = 4  # prompts per user: with answers this long the first ones outlast the test
FILL_TIMEOUT_S = 240.0
DOCTOR_TIMEOUT_S = 240  # only catches a hang: the doctor starts slowly while the fill saturates both cores


def fill_prompts(count: int) -> list[str]:
    """Distinct ~2,000-token prompts: prefix caching must not share their blocks."""
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "river",
        "mountain",
        "cloud",
        "stone",
        "tree",
        "bird",
        "fish",
        "wind",
        "rain",
        "sun",
        "moon",
        "star",
    ]
    rng = random.Random(0)
    return [f"{i}: " + " ".join(rng.choice(words) for _ in range(FILL_WORDS)) for i in range(count)]


async def fill_pool(server: Server) -> tuple[list[MetricsSnapshot], str]:
    """Keep prompts whose KV exceeds the predicted pool coming; sample until it is full and requests wait or
    are preempted, ask the doctor, then cancel everything. Each user sends its next prompt as soon as one
    ends, so the pool stays oversubscribed however long the doctor takes to start."""
    history: list[MetricsSnapshot] = []
    async with closed_loop(
        server, FILL_USERS, fill_prompts(FILL_USERS * FILL_ROUNDS), FILL_MAX_TOKENS, FILL_ROUNDS
    ) as load:
        deadline = time.monotonic() + FILL_TIMEOUT_S
        while time.monotonic() < deadline and not load.failures:
            history.append(await asyncio.to_thread(scrape, server.base_url))
            last = history[-1]
            if (last.waiting > 0 and (last.kv_usage or 0) >= HIGH_KV_USAGE) or last.preemptions_total > 0:
                break
            await asyncio.sleep(1.0)
        doctor = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "labs.doctor", "--url", server.base_url, "--samples", "2", "--interval-s", "0.5"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=server.env,
            timeout=DOCTOR_TIMEOUT_S,
        )
    assert not load.failures, load.summary()
    return history, doctor.stdout


@pytest.mark.server
@pytest.mark.slow
def test_the_predicted_pool_fills_and_the_doctor_says_kv_bound(small_pool_server: Server) -> None:
    """Real KV pressure: ~28k prompt tokens against the 23,296-token pool the sizing predicts."""
    history, doctor = asyncio.run(fill_pool(small_pool_server))
    last = history[-1]
    assert (last.waiting > 0 and last.kv_usage >= HIGH_KV_USAGE) or last.preemptions_total > 0, history[-5:]
    assert last.running < 32  # free batch slots: the pool, not MAX_NUM_SEQS, holds them back
    assert "diagnosis: KV-bound" in doctor and "raise VLLM_CPU_KVCACHE_SPACE from 1 to 2" in doctor, doctor
    assert "lower MAX_MODEL_LEN from 8192 to 4096" in doctor and "SWAP_SPACE adds no blocks on CPU" in doctor


# --- The lab page's commands, run as shown ------------------------------------------------------------

PAGE = "labs/sizing.md"


def expected_exit(shown: list[str]) -> int:
    if any(line.startswith("error:") for line in shown):
        return 2
    return 1 if any(line.startswith("does not fit") for line in shown) else 0


def test_page_shows_only_checked_commands() -> None:
    examples = doc_examples(PAGE)
    unchecked = [command for command in doc_commands(PAGE) if command not in examples]
    assert unchecked == [".venv/bin/python -m labs.sizing verify --url http://127.0.0.1:8009"]


@pytest.mark.parametrize("command", list(doc_examples(PAGE)))
def test_page_command_prints_what_the_page_shows(command: str) -> None:
    shown = doc_examples(PAGE)[command]
    result = run_doc(command, kit_env(VLLM_PORT=str(free_port()), RUNTIME="native"), timeout_s=300)
    output = result.stdout + result.stderr
    assert result.returncode == expected_exit(shown), output
    assert not shows(output, shown), f"{command}: the page shows lines the command does not print:\n{output}"


@pytest.mark.server
@pytest.mark.slow
def test_page_verify_command_matches_the_server(vllm_server: Server) -> None:
    (command,) = [command for command in doc_commands(PAGE) if " verify " in command]
    result = run_doc(retarget(command, {8009: vllm_server.port}), vllm_server.client_env(), timeout_s=120)
    assert result.returncode == 0 and result.stdout.count("match") == 7, result.stdout + result.stderr
    plan = started_plan(vllm_server)  # as up.sh recorded it
    assert f"SmolLM2-135M-Instruct in {plan.dtype} with {plan.kv_cache_space_gib} GiB" in result.stdout
    assert "from the record up wrote" in " ".join(result.stdout.split())
