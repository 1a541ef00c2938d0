"""llama.cpp's own C++ server with parallel slots (`llama-server --parallel N`): the engine a user who outgrows
Ollama's defaults runs.

Ollama answers one request at a time by default; this decodes LLAMA_SERVER_SLOTS requests together, batched
continuously, so the comparison with vLLM is not only with a queue. It is the same llama.cpp server as the
Ollama-class engine (serve/engines/llamacpp.py: PyPI's xllamacpp, nothing compiled), serving the same GGUF
under the same name, on its own port.
    .kit/run/llamaserver-PORT.pid, .kit/logs/llamaserver-PORT.log
"""

from __future__ import annotations

from serve.config.settings import Settings
from serve.engines.llamacpp import ENGINE_VERSION, GgufRuntime, gguf_decode_step, gguf_format, served_name
from serve.engines.runtime import Engine


class LlamaServerRuntime(GgufRuntime):
    """One llama-server per port (LLAMA_SERVER_PORT) with LLAMA_SERVER_SLOTS parallel slots."""

    engine = "llamaserver"
    label = "llama-server"
    port_setting = "LLAMA_SERVER_PORT"

    def __init__(self, settings: Settings) -> None:
        self.slots = settings.llama_server_slots
        super().__init__(settings)

    def slots_row(self) -> str:
        return (
            f"{self.slots} requests decoded together, {self.settings.max_model_len} tokens of context each "
            "(LLAMA_SERVER_SLOTS)"
        )


ENGINE = Engine(
    "llamaserver",
    port_setting=lambda settings: LlamaServerRuntime.port_setting,
    served_model=served_name,
    configured=lambda settings: (
        f"{ENGINE_VERSION}, {gguf_format(settings)}, LLAMA_SERVER_SLOTS={settings.llama_server_slots}"
    ),
    runtimes=lambda settings: [LlamaServerRuntime(settings)],
    decode_step=lambda settings, plan: gguf_decode_step(settings, settings.llama_server_slots),
)
