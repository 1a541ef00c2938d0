"""QUANTIZATION: what `auto` resolves to, what each runtime refuses, and int8 weights in the sizing (pure).

The real int8 engine, its recap and its quality: tests/labs/quantization/test_page.py."""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import pytest

from serve.config import plan, preflight
from serve.config.machine import Machine
from serve.config.model import INT8_CHECK_FILE, INT8_DIR, MODEL_DIR, int8_dir
from serve.config.plan import int8_check_due, resolve_quantization
from serve.config.settings import Settings
from serve.config.sizing import load_model_facts, model_facts
from serve.install.checkpoints import int8_current
from serve.install.quantize import CHECK_FILE, RECIPE_FILE, recipe_record
from ui.values import SettingsError

GiB_FREE = 16 << 30
AVX512_BF16 = Machine(2, frozenset({"avx2", "avx512f", "avx512_bf16"}), GiB_FREE)
AVX2 = Machine(2, frozenset({"avx2", "fma"}), GiB_FREE)
AMX = Machine(2, frozenset({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}), GiB_FREE)
CONFIG = json.loads((Path(__file__).resolve().parents[3] / "serve" / "bundled-model-config.json").read_text())


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def quantization_problem(settings: Settings, dtype: str, runtime: str, machine: Machine) -> str | None:
    """The preflight's check of QUANTIZATION as the runtime's plan resolves it."""
    quantization = resolve_quantization(settings, machine, container=runtime != "native")[0]
    return preflight.quantization_problem(settings, quantization, dtype, runtime, machine)


def test_auto_is_int8_natively_on_avx512_and_the_float_weights_elsewhere(tmp_path: Path) -> None:
    assert settings().quantization == "auto"
    assert resolve_quantization(settings(), AVX512_BF16)[0] == "int8"
    assert resolve_quantization(settings(), AMX)[0] == "int8"
    assert resolve_quantization(settings(DTYPE="float32"), AVX512_BF16)[0] == "int8"  # float32 activations
    assert resolve_quantization(settings(DTYPE="float32"), AMX) == (  # AMX's int8 kernel: bfloat16 only
        "none",
        "auto: the float weights, as DTYPE=float32 asks (the AMX int8 kernel takes bfloat16 only)",
    )
    assert resolve_quantization(settings(), AVX2) == (
        "none",
        "auto: the float weights on a CPU without AVX-512 (int8 is slower there: labs/quantization.md)",
    )
    assert resolve_quantization(settings(), AVX512_BF16, container=True)[0] == "none"  # docker, docker-gpu, a pod
    assert resolve_quantization(settings(QUANTIZATION="none"), AVX512_BF16) == ("none", "set in QUANTIZATION")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    own_model = settings(MODEL_PATH=str(tmp_path), MODEL_NAME="me/mine")
    assert resolve_quantization(own_model, AVX512_BF16) == (  # a folder of one's own: float until its check ran
        "none",
        "auto: the float weights until this model's int8 check has run (its first start runs it)",
    )
    assert int8_check_due(own_model, AVX512_BF16) and not int8_check_due(own_model, AVX2)
    assert settings(QUANTIZATION="").quantization == "none"  # an empty value, as older .env files have it


def test_a_misspelt_quantization_is_refused_with_the_values() -> None:
    with pytest.raises(SettingsError, match=r"QUANTIZATION='int4' is invalid: use auto, none .* int8"):
        settings(QUANTIZATION="int4")


@pytest.mark.parametrize(
    ("value", "runtime", "machine", "dtype", "refusal"),
    [
        ("awq", "native", AVX512_BF16, "bfloat16", r"QUANTIZATION=awq is the GPU track's .* set QUANTIZATION=int8"),
        ("fp8", "docker", AVX512_BF16, "bfloat16", r"QUANTIZATION=fp8 is the GPU track's"),
        ("int8", "docker-gpu", AVX512_BF16, "auto", r"QUANTIZATION=int8 is the CPU track's .* QUANTIZATION=fp8"),
        (
            "int8",
            "docker",
            AVX512_BF16,
            "bfloat16",
            r"Docker CPU track loads MODEL_NAME from the hub in its container: use RUNTIME=native",
        ),
        ("int8", "native", AMX, "float32", r"DTYPE=float32 cannot run on this CPU: it has AMX.* set DTYPE=bfloat16"),
    ],
)
def test_what_a_runtime_cannot_serve_is_refused_in_one_line(
    value: str, runtime: str, machine: Machine, dtype: str, refusal: str
) -> None:
    problem = quantization_problem(settings(QUANTIZATION=value, DTYPE=dtype), dtype, runtime, machine)
    assert problem is not None and "\n" not in problem
    assert re.search(refusal, problem), problem


@pytest.mark.parametrize(
    ("value", "runtime", "machine", "dtype"),
    [
        ("int8", "native", AVX2, "float32"),
        ("int8", "native", AMX, "bfloat16"),
        ("auto", "docker", AMX, "float32"),
        ("awq", "docker-gpu", AVX2, "auto"),
        ("none", "native", AMX, "float32"),
        ("auto", "native", AVX2, "float32"),
        ("auto", "native", AMX, "float32"),
    ],
)
def test_what_a_runtime_can_serve_passes(value: str, runtime: str, machine: Machine, dtype: str) -> None:
    assert quantization_problem(settings(QUANTIZATION=value, DTYPE=dtype), dtype, runtime, machine) is None


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file's header (shapes and dtypes) with zeroed data: what sizing reads of a checkpoint."""
    itemsize = {"I8": 1, "F32": 4, "BF16": 2}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = itemsize[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_int8_weights_are_one_byte_whatever_the_dtype_and_the_embedding_stays_16_bit(tmp_path: Path) -> None:
    write_safetensors(
        tmp_path / "model.safetensors",
        {
            "model.embed_tokens.weight": ("F32", [100, 8]),
            "model.layers.0.self_attn.q_proj.weight": ("I8", [8, 8]),
            "model.layers.0.self_attn.q_proj.weight_scale": ("F32", [8, 1]),
            "model.layers.0.mlp.down_proj.weight": ("I8", [8, 16]),
            "model.norm.weight": ("F32", [8]),
        },
    )
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    facts = load_model_facts(tmp_path)
    assert (facts.num_params, facts.num_projection_params, facts.num_int8_params) == (800 + 64 + 8 + 128 + 8, 192, 192)
    assert facts.weight_bytes("bfloat16") == 192 + 2 * (800 + 8 + 8)
    assert facts.weight_bytes("float32") == 192 + 4 * (800 + 8 + 8)


def test_the_bundled_model_in_int8_reads_163_mb_a_step_and_the_sizing_lab_agrees() -> None:
    facts = model_facts(CONFIG, "SmolLM2")  # config arithmetic, as before the model is prepared
    int8 = facts.as_int8()
    assert round(int8.weight_bytes("bfloat16") / 1e6) == 163 and round(facts.weight_bytes("bfloat16") / 1e6) == 269
    assert int8.num_int8_params == facts.num_projection_params == 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536)
    assert facts.weight_bytes("int8") == int8.weight_bytes("bf16")  # the lab's --weights int8


def test_the_int8_checkpoint_lives_beside_its_source_and_a_new_recipe_prepares_it_again(tmp_path: Path) -> None:
    assert int8_dir(MODEL_DIR) == INT8_DIR and INT8_DIR.parent == MODEL_DIR.parent
    other = int8_dir(tmp_path)
    assert other.name.startswith(tmp_path.name) and other != int8_dir(tmp_path / "elsewhere")
    source, prepared = tmp_path / "float", tmp_path / "int8"
    source.mkdir()
    prepared.mkdir()
    write_safetensors(source / "model.safetensors", {"model.norm.weight": ("F32", [8])})
    assert not int8_current(prepared, source)  # nothing prepared yet
    (prepared / RECIPE_FILE).write_text(json.dumps(recipe_record(source)))
    assert int8_current(prepared, source)
    stale = recipe_record(source)
    stale["recipe"] = {**stale["recipe"], "smoothquant_alpha": 0.8}
    (prepared / RECIPE_FILE).write_text(json.dumps(stale))
    assert not int8_current(prepared, source)


@pytest.mark.parametrize(
    ("change", "served"),
    [(0.0089, "int8"), (-0.004, "int8"), (0.0125, "none")],
)
def test_auto_serves_a_learners_model_in_int8_where_its_check_held_within_1_percent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: float, served: str
) -> None:
    """The check quantize.py writes beside the int8 checkpoint: perplexity on the kit's calibration text, float against
    the int8 arithmetic; auto serves int8 within 1%, else the float weights with the numbers."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    own_model = settings(MODEL_PATH=str(tmp_path), MODEL_NAME="me/mine")
    check = {"float_perplexity": 12.0, "int8_perplexity": 12.0 * (1 + change), "change": change}
    monkeypatch.setattr(plan, "int8_check", lambda settings: check)
    quantization, why = resolve_quantization(own_model, AVX512_BF16)
    assert quantization == served, why
    assert f"{change:+.2%} as int8 (12.000 -> {12.0 * (1 + change):.3f})" in why
    assert not int8_check_due(own_model, AVX512_BF16)  # checked once per machine


def test_auto_keeps_a_model_the_int8_recipe_does_not_know_in_float(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, "architectures": ["GPT2LMHeadModel"]}))
    own_model = settings(MODEL_PATH=str(tmp_path), MODEL_NAME="me/gpt2")
    assert resolve_quantization(own_model, AVX512_BF16) == (
        "none",
        "auto: the float weights; the kit's int8 recipe does not know GPT2LMHeadModel's layers",
    )
    assert not int8_check_due(own_model, AVX512_BF16)


def test_quantize_writes_its_check_where_the_plan_reads_it() -> None:
    assert CHECK_FILE == INT8_CHECK_FILE
