"""llama.cpp's own C++ server (`llama-server`): the engine a user who outgrows Ollama's defaults runs.

Ollama and llama-cpp-python answer one request at a time; llama-server decodes LLAMA_SERVER_SLOTS requests
together, batched continuously, so the comparison with vLLM is not only with a queue. It serves the same
Q4_1 GGUF as the llama.cpp engine (serve/engines/llamacpp.py), under the same Ollama name, on its own port.
No prebuilt binary is fetched: it is built portably from llama.cpp's source once per machine
(serve/install/llama_server_build.py).
    .kit/run/llamaserver-PORT.pid, .kit/logs/llamaserver-PORT.log
"""

from __future__ import annotations

import os
from pathlib import Path

from serve.config.machine import detect
from serve.config.plan import resolve_threads
from serve.config.settings import Settings
from serve.engines.llamacpp import MODEL_ALIAS, GgufRuntime, Install
from serve.engines.runtime import DecodeStep, Engine, Started
from serve.install.llama_server_build import BINARY, GGUF, LLAMACPP_VERSION, install, will_build
from serve.processes.local_server import LocalServer

HEALTH_PATH = "/health"  # 503 while the model loads, 200 once every slot is ready


class LlamaServerRuntime(GgufRuntime):
    """One llama-server per port (LLAMA_SERVER_PORT) with LLAMA_SERVER_SLOTS parallel slots."""

    engine = "llamaserver"
    label = "llama-server"
    port_setting = "LLAMA_SERVER_PORT"
    installs = Install(run=install, will_build=will_build)
    engine_version = f"llama-server from llama-cpp-python {LLAMACPP_VERSION}'s llama.cpp"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.port_of(self.port_setting)
        self.slots = settings.llama_server_slots
        self.server = LocalServer.of(
            settings, "llama-server", "llamaserver", str(BINARY), self.port, self.port_setting, HEALTH_PATH
        )

    def command(self, threads: int) -> tuple[list[str], dict[str, str]]:
        argv = [
            str(BINARY),
            "--model",
            str(GGUF),
            "--alias",
            MODEL_ALIAS,
            "--host",
            self.settings.host,
            "--port",
            str(self.port),
            "--parallel",
            str(self.slots),
            "--ctx-size",
            str(context_tokens(self.settings)),
            "--threads",
            str(threads),
            "--threads-batch",
            str(threads),
            "--metrics",  # its Prometheus /metrics (llamacpp:* names), which serve/observe/ scrapes
        ]
        env = {key: value for key, value in os.environ.items() if key != "LLAMA_API_KEY"}  # VLLM_API_KEY decides
        if self.settings.api_key:
            env["LLAMA_API_KEY"] = self.settings.api_key  # llama-server reads it; argv would show in `ps`
        return argv, env

    def gguf(self) -> Path:
        return GGUF

    def notes(self) -> dict[str, str]:
        return {**super().notes(), "slots": str(self.slots), "ctx_size": str(context_tokens(self.settings))}

    def recap_rows(self, started: Started | None) -> list[tuple[str, str]]:
        return [
            ("threads", str(self.threads())),
            (
                "slots",
                f"{self.slots} requests decoded together, {self.settings.max_model_len} tokens of context "
                "each (LLAMA_SERVER_SLOTS)",
            ),
            ("binary", str(BINARY)),
        ]


def context_tokens(settings: Settings) -> int:
    """llama-server's --ctx-size: it splits its context among the slots, each getting what vLLM gives one sequence."""
    return settings.llama_server_slots * settings.max_model_len


def decode_step(settings: Settings) -> DecodeStep:
    """LLAMA_SERVER_SLOTS sequences a step, batched continuously, every weight of the GGUF its install fetched."""
    slots = settings.llama_server_slots
    facts = {
        "gguf": GGUF.name,
        "threads": resolve_threads(settings, detect())[0],
        "slots": slots,
        "ctx_size": context_tokens(settings),
    }
    return DecodeStep(GGUF.stat().st_size, slots, facts)


ENGINE = Engine(
    "llamaserver",
    port_setting=lambda settings: LlamaServerRuntime.port_setting,
    served_model=lambda settings: MODEL_ALIAS,
    configured=lambda settings: (
        f"llama.cpp's llama-server from llama-cpp-python {LLAMACPP_VERSION}'s source, Q4_1 GGUF, "
        f"LLAMA_SERVER_SLOTS={settings.llama_server_slots}"
    ),
    runtimes=lambda settings: [LlamaServerRuntime(settings)],
    decode_step=decode_step,
)
