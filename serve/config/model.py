"""The kit's model: where the native runtime keeps it, and its facts for sizing before and after preparing it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from serve.config.chat_template import ChatTemplate, bundled_chat_template, model_chat_template
from serve.config.gguf_file import GgufFile, gguf_file
from serve.config.model_source import (
    GGUF_NAME,
    MODEL_DIR,
    MODEL_PACKAGE,
    PREPARED_DIR,
    ModelKind,
    ModelSource,
    file_key,
    model_source,
)
from serve.config.paths import ROOT
from serve.config.settings import BUNDLED_MODEL_NAME, Settings
from serve.config.sizing import ModelFacts, load_model_facts, model_facts
from ui.values import SettingsError

__all__ = ["GGUF_NAME", "MODEL_DIR", "MODEL_PACKAGE", "BUNDLED_MODEL_NAME"]  # the bundled model's, for their users

BUNDLED_MODEL_CONFIG = ROOT / "serve" / "bundled-model-config.json"  # a copy of the prepared config.json
NATIVE_RUNTIMES = ("native", "auto")
# QUANTIZATION=int8: the int8 W8A8 checkpoint serve/install/quantize.py writes from the float one, once per machine and
# source folder: beside the bundled model, or under CACHE_DIR/models/int8 for a MODEL_PATH folder.
INT8_SUFFIX = "-int8-w8a8"
INT8_DIR = MODEL_DIR.with_name(MODEL_DIR.name + INT8_SUFFIX)
# beside an int8 checkpoint: its perplexity against the float model's on the kit's calibration text (quantize.py's
# CHECK_FILE), what QUANTIZATION=auto decides a learner's model by (serve/config/plan.py)
INT8_CHECK_FILE = "kit-perplexity-check.json"
# the layers serve/install/quantize.py's SmoothQuant folds into: q/k/v/o and gate/up/down projections after a norm
INT8_RECIPE_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "StableLmForCausalLM",
)


def bundled_model_facts() -> ModelFacts:
    """The kit's model: its prepared checkpoint (exact parameter count from safetensors) or the config copy."""
    if (MODEL_DIR / "config.json").exists():
        return load_model_facts(MODEL_DIR)
    return model_facts(json.loads(BUNDLED_MODEL_CONFIG.read_text()), MODEL_DIR.name)


def native_model_dir(settings: Settings) -> Path:
    """The checkpoint folder the native runtime serves as the source's name (model_source.py): MODEL_PATH's folder,
    the one prepared from its GGUF or the hub's snapshot, or the bundled model's."""
    return model_source(settings).folder


def checked_source(settings: Settings) -> ModelSource:
    """The source (model_source.py), refused in one line when vLLM cannot serve it: an Ollama model not in the store,
    a GGUF whose architecture transformers cannot turn into a checkpoint."""
    source = model_source(settings)
    header = source_gguf(source)
    refusal = None if header is None else header.refusal(f"MODEL_PATH={source.origin}")
    if refusal is not None:
        raise SettingsError(refusal)
    return source


def source_gguf(source: ModelSource) -> GgufFile | None:
    """The header of the learner's own GGUF (a file, an Ollama blob); None for a model with none."""
    if source.gguf is None:
        return None
    return gguf_file(source.gguf, file_key(source.gguf))


def int8_dir(source: Path) -> Path:
    """Where the int8 checkpoint of a float model folder lives (serve/install/quantize.py writes it there)."""
    if source == MODEL_DIR:
        return INT8_DIR
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    return PREPARED_DIR / "int8" / f"{source.name}-{digest}{INT8_SUFFIX}"


def served_weights_dir(settings: Settings, quantization: str) -> Path:
    """The folder the native runtime gives vLLM as --model: the float checkpoint, or its int8 one (`quantization`:
    the plan's, QUANTIZATION resolved)."""
    source = native_model_dir(settings)
    return int8_dir(source) if quantization == "int8" else source


def model_facts_for(settings: Settings, runtime: str) -> ModelFacts | None:
    """The float checkpoint `runtime` serves: natively the source's (model_source.py), its GGUF's header before it is
    prepared, unknown for a hub model not yet downloaded; a Docker track serves MODEL_NAME from the hub, known here
    only if it is the bundled model."""
    if runtime not in NATIVE_RUNTIMES:
        return bundled_model_facts() if settings.model_name == BUNDLED_MODEL_NAME else None
    source = model_source(settings)
    if source.kind is ModelKind.BUNDLED:
        return bundled_model_facts()
    if (source.folder / "config.json").is_file():  # counted from its safetensors, else from the config (a hub's)
        return dataclasses.replace(load_model_facts(source.folder), name=source.served_name)
    header = source_gguf(source)
    return None if header is None else header.facts(source.served_name)


def served_facts(settings: Settings, facts: ModelFacts | None, quantization: str) -> ModelFacts | None:
    """The float model's `facts` as `quantization` serves them: int8, its prepared checkpoint, or the float one's
    projections counted as int8 before it is prepared."""
    if facts is None or quantization != "int8":
        return facts
    prepared = int8_dir(native_model_dir(settings))
    if not (prepared / "model.safetensors").exists():
        return facts.as_int8()
    return dataclasses.replace(load_model_facts(prepared), name=facts.name)  # messages name the model, not its folder


def served_model_facts(settings: Settings, runtime: str, quantization: str) -> ModelFacts | None:
    """What `runtime` serves with the plan's `quantization`: the sizing's and the record's facts."""
    return served_facts(settings, model_facts_for(settings, runtime), quantization)


def served_chat_template(settings: Settings, runtime: str) -> ChatTemplate | None:
    """The served model's own chat template: natively the source's checkpoint's, its GGUF's before it is prepared
    (the one transformers carries into the checkpoint), or the bundled model's (its copy before it is prepared); a
    Docker track loads MODEL_NAME from the hub, whose template is known here only for the bundled model."""
    if runtime in NATIVE_RUNTIMES:
        source = model_source(settings)
        if source.kind is ModelKind.BUNDLED:
            return bundled_chat_template()
        if (source.folder / "config.json").is_file():
            return model_chat_template(source.folder)
        header = source_gguf(source)
        return ChatTemplate(header.chat_template) if header is not None and header.chat_template else None
    if settings.model_name != BUNDLED_MODEL_NAME:
        return None
    return bundled_chat_template()


def learners_model(settings: Settings) -> bool:
    """A model of the learner's own (MODEL_PATH, or a hub MODEL_NAME), not the bundled one."""
    return settings.model_path is not None or settings.model_name != BUNDLED_MODEL_NAME


def unknown_to_int8_recipe(settings: Settings) -> str | None:
    """The architecture of the served checkpoint when the kit's int8 recipe does not know its layers (None: it does,
    or the checkpoint is not prepared yet)."""
    config = native_model_dir(settings) / "config.json"
    if not config.is_file():
        return None
    architectures = json.loads(config.read_text()).get("architectures") or ["an unnamed architecture"]
    return None if architectures[0] in INT8_RECIPE_ARCHITECTURES else architectures[0]


def int8_check(settings: Settings) -> dict[str, float] | None:
    """The served model's int8 check (INT8_CHECK_FILE), once its int8 checkpoint is made; None before."""
    try:
        return json.loads((int8_dir(native_model_dir(settings)) / INT8_CHECK_FILE).read_text())
    except (OSError, ValueError):
        return None
