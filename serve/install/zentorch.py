"""AMD's zentorch for the native vLLM, where ZENTORCH resolves to true (serve/config/plan.py): `.kit/zentorch`.

vLLM 0.32 switches to its ZenCpuPlatform when `import zentorch` works on an AMD CPU with AVX-512
(vllm/platforms/__init__.py): its linears then run through zentorch's kernels. zentorch goes into a folder of its own,
installed with pip's --target and put on the engine's PYTHONPATH when the plan says so (serve/engines/native.py), never
into the vLLM venv: one venv serves with and without it, and switching ZENTORCH back off is a restart, not a
reinstall. Its requirements beside torch, numpy and safetensors (the venv has those) are two small wheels.
"""

from __future__ import annotations

from collections.abc import Callable

from serve.config.paths import STATE_DIR
from serve.install import vllm_venv
from serve.install.venv import STAMP_NAME
from serve.processes import process
from serve.processes.local_server import LOG_DIR
from ui.progress import console, in_background

ZENTORCH_VERSION = "2.13.0.2"  # pairs with the venv's torch 2.13 (serve/install/torch_cpu.py); 2.14.x needs 2.14
# zentorch's own requirements that vLLM's venv lacks (`deprecated` and its `wrapt`), pinned as tested
REQUIREMENTS = (f"zentorch=={ZENTORCH_VERSION}", "deprecated==1.3.1", "wrapt==2.5.2")
FOLDER = STATE_DIR / "zentorch"
INSTALL_LOG = LOG_DIR / "install-zentorch.log"
WANTED = "".join(f"{line}\n" for line in REQUIREMENTS)


def installed() -> bool:
    stamp = FOLDER / STAMP_NAME
    return stamp.exists() and stamp.read_text() == WANTED


def install(alongside: Callable[[], object] = lambda: None) -> bool:
    """Install REQUIREMENTS into FOLDER (once: its stamp, written last, says it holds them) with the vLLM venv's pip
    and the user's pip configuration, while `alongside` runs (a download: it leaves the cores to the int8
    checkpoint). True if it installed."""
    if installed():
        alongside()
        return False
    lock = FOLDER.with_name(f"{FOLDER.name}.install.lock")
    with process.file_lock(lock, "zentorch is being installed", console.print):
        if installed():
            alongside()
            return False
        INSTALL_LOG.unlink(missing_ok=True)
        with in_background(
            f"Installing AMD's zentorch {ZENTORCH_VERSION} into {FOLDER.name} (ZENTORCH; 27 MB, beside vLLM's venv)",
            [*vllm_venv.VENV.pip, "install", "--no-deps", "--upgrade", "--target", str(FOLDER), *REQUIREMENTS],
            INSTALL_LOG,
        ):
            alongside()
        (FOLDER / STAMP_NAME).write_text(WANTED)
    return True
