"""KV sizing's arithmetic (serve/config/sizing.py): the course's V0 figure, V1's real numbers, memory sizes, fits.

Pure: no engine. The sizing command and its predictions checked against live vLLM servers are
tests/labs/sizing/test_sizing.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serve.config.model import BUNDLED_MODEL_CONFIG, MODEL_DIR, bundled_model_facts
from serve.config.sizing import (
    V0_BLOCK_SIZE,
    VLLM_CPU_OVERHEAD_BYTES,
    GiB,
    SizingError,
    fit_memory_cap,
    kv_pool,
    kv_space_gib_for_tokens,
    load_model_facts,
    model_facts,
    params_from_config,
    parse_memory_size,
)
from tests.conftest import ROOT

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


@pytest.mark.parametrize(
    ("dtype", "blocks", "tokens", "concurrency"), [("float32", 182, 23_296, 22.75), ("bfloat16", 364, 46_592, 45.5)]
)
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
    gemma_like = {
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "hidden_size": 3072,
        "head_dim": 256,
        "intermediate_size": 24576,
        "vocab_size": 256000,
    }
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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5g", 5 * GiB),
        ("5G", 5 * GiB),
        ("5gb", 5 * GiB),
        ("5GiB", 5 * GiB),
        ("512m", 512 << 20),
        ("1.5g", 3 * GiB // 2),
        ("1073741824", GiB),
        ("2048k", 2 << 20),
    ],
)
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
    fit = fit_memory_cap(
        load_model_facts(LLAMA_8B), weights, int(24 * GiB * 0.9), 2 * GiB, block_size=16, whole_gib=False
    )
    assert round(fit.kv_budget_bytes / GiB, 2) == kv_gib
    assert fit.fits == (kv_gib > 0)


def test_kv_space_for_tokens_is_the_smallest_whole_gib() -> None:
    llama = load_model_facts(LLAMA_8B)
    assert kv_space_gib_for_tokens(llama, "bfloat16", 8192) == 1
    assert kv_space_gib_for_tokens(llama, "bfloat16", 8193) == 2
    assert kv_pool(llama, "bfloat16", 1 * GiB).num_tokens == 8192
