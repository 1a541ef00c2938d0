"""KV sizing: the course's V0 figure, V1's real numbers, and predictions checked against live vLLM servers."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labs.common.metrics import MetricsSnapshot, scrape
from labs.doctor.diagnosis import HIGH_KV_USAGE
from labs.sizing.verify import compare, served
from serve.local_server import LOG_DIR
from serve.machine import detect
from serve.model import BUNDLED_MODEL_CONFIG, bundled_model_facts
from serve.model import MODEL_DIR
from serve.settings import Settings
from serve.sizing import (V0_BLOCK_SIZE, VLLM_CPU_OVERHEAD_BYTES, GiB, SizingError, fit_memory_cap, kv_pool,
                          kv_space_gib_for_tokens, load_model_facts, model_facts, params_from_config, parse_memory_size)
from serve.vllm_command import resolve
from tests.conftest import ROOT, Server, free_port, kit_env, start_server, stop_server
from tests.support.docs import doc_commands, doc_examples, retarget, run_doc, shows
from tests.support.load import closed_loop

LLAMA_8B = ROOT / "labs" / "sizing" / "examples" / "llama-3.1-8b-config.json"
LLAMA_8B_PARAMS = 8_030_261_248  # Meta's model card: 8.03B
SMOLLM2_PARAMS = 134_515_008


def smollm2():
    return load_model_facts(MODEL_DIR)


def test_the_course_v0_figure() -> None:
    pool = kv_pool(smollm2(), "float32", 1 * GiB, V0_BLOCK_SIZE)
    assert pool.bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46_080
    assert (pool.num_blocks, pool.num_tokens) == (1456, 23_296)
    assert pool.max_concurrency(1024) == 22.75


@pytest.mark.parametrize(("dtype", "blocks", "tokens", "concurrency"),
                         [("float32", 182, 23_296, 22.75), ("bfloat16", 364, 46_592, 45.5)])
def test_v1_cpu_blocks_of_128_follow(dtype: str, blocks: int, tokens: int, concurrency: float) -> None:
    pool = kv_pool(smollm2(), dtype, 1 * GiB)
    assert (pool.block_size, pool.num_blocks, pool.num_tokens) == (128, blocks, tokens)
    assert pool.max_concurrency(1024) == concurrency


def test_concurrency_counts_whole_blocks_per_sequence() -> None:
    pool = kv_pool(smollm2(), "float32", 1 * GiB)
    assert pool.blocks_per_sequence(1000) == pool.blocks_per_sequence(1024) == 8
    assert pool.blocks_per_sequence(1025) == 9
    assert pool.max_num_seqs(8192) == 2 and pool.max_concurrency(8192) == 182 / 64
    assert pool.fits_one_sequence(23_296) and not pool.fits_one_sequence(23_297)


def test_grouped_query_attention_uses_kv_heads() -> None:
    config = json.loads((MODEL_DIR / "config.json").read_text())
    mha = model_facts({**config, "num_key_value_heads": config["num_attention_heads"]})
    assert mha.kv_bytes_per_token("float32") == 3 * smollm2().kv_bytes_per_token("float32")
    missing = {key: value for key, value in config.items() if key != "num_key_value_heads"}
    assert model_facts(missing).num_kv_heads == config["num_attention_heads"]


def test_explicit_head_dim_wins_over_hidden_by_heads() -> None:
    gemma_like = {"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
                  "hidden_size": 3072, "head_dim": 256, "intermediate_size": 24576, "vocab_size": 256000}
    assert model_facts(gemma_like).head_dim == 256
    assert model_facts({**gemma_like, "head_dim": None}).head_dim == 3072 // 16


def test_parameter_count_from_safetensors_equals_config_arithmetic() -> None:
    facts = smollm2()
    assert facts.params_source == "safetensors header" and facts.num_params == SMOLLM2_PARAMS
    assert params_from_config(json.loads((MODEL_DIR / "config.json").read_text())) == SMOLLM2_PARAMS
    llama = load_model_facts(LLAMA_8B)
    assert llama.params_source == "config arithmetic" and llama.num_params == LLAMA_8B_PARAMS
    assert llama.weight_bytes("bf16") == 2 * LLAMA_8B_PARAMS and llama.weight_bytes("int4") == LLAMA_8B_PARAMS // 2


def test_bundled_config_copy_matches_the_prepared_model() -> None:
    assert json.loads(BUNDLED_MODEL_CONFIG.read_text()) == json.loads((MODEL_DIR / "config.json").read_text())
    assert bundled_model_facts() == smollm2()


@pytest.mark.parametrize(("text", "expected"), [("5g", 5 * GiB), ("5G", 5 * GiB), ("5gb", 5 * GiB),
                                                ("5GiB", 5 * GiB), ("512m", 512 << 20), ("1.5g", 3 * GiB // 2),
                                                ("1073741824", GiB), ("2048k", 2 << 20)])
def test_memory_sizes_read_as_docker_does(text: str, expected: int) -> None:
    assert parse_memory_size(text) == expected


@pytest.mark.parametrize("text", ["five gigs", "5x", "", "g", "-1g"])
def test_bad_memory_sizes_say_what_to_write(text: str) -> None:
    with pytest.raises(SizingError, match="such as 5g"):
        parse_memory_size(text)


def test_bad_model_paths_say_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(SizingError, match="give a model directory"):
        load_model_facts(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(SizingError, match="num_hidden_layers"):
        load_model_facts(tmp_path)


def test_backwards_under_a_5g_container() -> None:
    fit = fit_memory_cap(smollm2(), "bf16", parse_memory_size("5g"), VLLM_CPU_OVERHEAD_BYTES)
    assert fit.fits and fit.kv_budget_bytes == 2 * GiB  # 5 - 0.25 weights - 2 runtime = 2.75 -> whole GiB
    assert fit.pool.num_tokens == 2 * 46_592 and fit.pool.max_num_seqs(1024) == 91
    llama = load_model_facts(LLAMA_8B)
    assert not fit_memory_cap(llama, "bf16", parse_memory_size("5g"), VLLM_CPU_OVERHEAD_BYTES).fits
    assert not fit_memory_cap(llama, "int4", parse_memory_size("5g"), VLLM_CPU_OVERHEAD_BYTES).fits
    eight = fit_memory_cap(llama, "int4", parse_memory_size("8g"), VLLM_CPU_OVERHEAD_BYTES)
    assert eight.kv_budget_bytes == 2 * GiB and eight.pool.num_tokens == 16_384  # 128 KiB per token in bf16


@pytest.mark.parametrize(("weights", "kv_gib"), [("fp32", 0.0), ("bf16", 4.64), ("fp8", 12.12), ("int4", 15.86)])
def test_backwards_on_a_24_gib_gpu_at_0_9(weights: str, kv_gib: float) -> None:
    fit = fit_memory_cap(load_model_facts(LLAMA_8B), weights, int(24 * GiB * 0.9), 2 * GiB, block_size=16,
                         whole_gib=False)
    assert round(fit.kv_budget_bytes / GiB, 2) == kv_gib
    assert fit.fits == (kv_gib > 0)


def test_kv_space_for_tokens_is_the_smallest_whole_gib() -> None:
    llama = load_model_facts(LLAMA_8B)
    assert kv_space_gib_for_tokens(llama, "bfloat16", 8192) == 1
    assert kv_space_gib_for_tokens(llama, "bfloat16", 8193) == 2
    assert kv_pool(llama, "bfloat16", 1 * GiB).num_tokens == 8192


def sizing(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labs.sizing", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_command_reproduces_the_course_figure() -> None:
    result = sizing("kv", "--v0", "--dtype", "float32", "--kv-gib", "1", "--max-model-len", "1024")
    assert result.returncode == 0, result.stderr
    for expected in ("46,080", "1,456", "23,296", "22.75x"):
        assert expected in result.stdout


def test_command_refuses_a_bad_size_in_one_line() -> None:
    result = sizing("fit", "--memory", "lots")
    assert result.returncode == 2
    assert "is not a memory size" in result.stderr and "Traceback" not in result.stdout + result.stderr


# --- Proof against the real engine: three configurations -----------------------------------------------

def verify_server(server: Server, dtype: str, kv_gib: int) -> None:
    engine = served(server.base_url, log_path=LOG_DIR / f"vllm-{server.port}.log")
    rows = compare(bundled_model_facts(), dtype, kv_gib * GiB, engine)
    assert {row.source for row in rows} == {"/metrics", "startup log"}
    assert len(rows) == 7 and all(row.matches for row in rows), rows
    result = sizing("verify", "--url", server.base_url, "--dtype", dtype, "--kv-gib", str(kv_gib),
                    "--log", str(LOG_DIR / f"vllm-{server.port}.log"))
    assert result.returncode == 0 and result.stdout.count("match") == 7, result.stdout + result.stderr


@pytest.mark.server
@pytest.mark.slow
def test_prediction_equals_the_session_server(vllm_server: Server) -> None:
    dtype = resolve(Settings.from_env(vllm_server.env), detect(), bundled_model_facts()).dtype
    verify_server(vllm_server, dtype, 1)


@pytest.fixture(scope="module")
def small_pool_server() -> Iterator[Server]:
    """float32 with 1 GiB: the smallest pool (23,296 tokens); 32 slots, so slots are never the limit."""
    server = start_server(DTYPE="float32", VLLM_CPU_KVCACHE_SPACE="1", MAX_MODEL_LEN="8192", MAX_NUM_SEQS="32",
                          BLOCK_SIZE="128", ENFORCE_EAGER="true")
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
    server = start_server(DTYPE="bfloat16", VLLM_CPU_KVCACHE_SPACE="2", MAX_MODEL_LEN="2048", BLOCK_SIZE="128",
                          ENFORCE_EAGER="true")
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
    words = "alpha beta gamma delta river mountain cloud stone tree bird fish wind rain sun moon star".split()
    rng = random.Random(0)
    return [f"{i}: " + " ".join(rng.choice(words) for _ in range(FILL_WORDS)) for i in range(count)]


async def fill_pool(server: Server) -> tuple[list[MetricsSnapshot], str]:
    """Keep prompts whose KV exceeds the predicted pool coming; sample until it is full and requests wait or
    are preempted, ask the doctor, then cancel everything. Each user sends its next prompt as soon as one
    ends, so the pool stays oversubscribed however long the doctor takes to start."""
    history: list[MetricsSnapshot] = []
    async with closed_loop(server, FILL_USERS, fill_prompts(FILL_USERS * FILL_ROUNDS), FILL_MAX_TOKENS,
                           FILL_ROUNDS) as failures:
        deadline = time.monotonic() + FILL_TIMEOUT_S
        while time.monotonic() < deadline and not failures:
            history.append(await asyncio.to_thread(scrape, server.base_url))
            last = history[-1]
            if (last.waiting > 0 and (last.kv_usage or 0) >= HIGH_KV_USAGE) or last.preemptions_total > 0:
                break
            await asyncio.sleep(1.0)
        doctor = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "labs.doctor", "--url", server.base_url, "--samples", "2",
                             "--interval-s", "0.5"], capture_output=True, text=True, cwd=ROOT, env=server.env,
            timeout=DOCTOR_TIMEOUT_S)
    assert not failures, f"{len(failures)} fill requests failed, e.g. {failures[0].error}"
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
    dtype = resolve(Settings.from_env(vllm_server.env), detect(), bundled_model_facts()).dtype
    assert f"SmolLM2-135M-Instruct in {dtype} with 1 GiB" in result.stdout
