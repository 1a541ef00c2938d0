"""KV sizing: the course's V0 figure, V1's real numbers, and predictions checked against live vLLM servers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labs.sizing.verify import compare, served
from serve.machine import detect
from serve.native import LOG_DIR, MODEL_DIR
from serve.preflight import BUNDLED_MODEL_CONFIG, bundled_model_facts
from serve.settings import Settings
from serve.sizing import (GiB, V0_BLOCK_SIZE, VLLM_CPU_OVERHEAD_BYTES, SizingError, fit_memory_cap, kv_pool,
                          kv_space_gib_for_tokens, load_model_facts, model_facts, params_from_config,
                          parse_memory_size)
from serve.vllm_command import resolve
from tests.conftest import ROOT, Server, free_port, kit_env, start_server, stop_server
from tests.docs import doc_commands, doc_examples, retarget, run_doc, shows

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
    assert "is not a memory size" in result.stdout and "Traceback" not in result.stdout + result.stderr


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
    dtype = resolve(Settings.from_env(vllm_server.env), detect()).dtype
    verify_server(vllm_server, dtype, 1)


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "kv_gib", "max_model_len", "blocks"),
                         [("float32", 1, 8192, 182), ("bfloat16", 2, 2048, 728)])
def test_prediction_equals_a_live_server(dtype: str, kv_gib: int, max_model_len: int, blocks: int) -> None:
    server = start_server(DTYPE=dtype, VLLM_CPU_KVCACHE_SPACE=str(kv_gib), MAX_MODEL_LEN=str(max_model_len),
                          ENFORCE_EAGER="true")
    try:
        engine = served(server.base_url)
        assert engine.max_model_len == max_model_len and engine.cache_config["num_gpu_blocks"] == str(blocks)
        verify_server(server, dtype, kv_gib)
        if max_model_len * 16 > blocks * 128:  # MAX_NUM_SEQS=16 full-length sequences overflow the pool
            assert "admission queues on KV space" in server.up_output
    finally:
        stop_server(server)


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
    dtype = resolve(Settings.from_env(vllm_server.env), detect()).dtype
    assert f"SmolLM2-135M-Instruct in {dtype} with 1 GiB" in result.stdout
