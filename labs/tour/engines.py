"""The engines the tour needs, through the kit's own `up.sh` and `down.sh`, said before it does either.

Policy: an engine that already answers is used as it is and left running; one that does not is started with
`ENGINES=<name> bash up.sh` (the port from the settings) and stopped at the end with the same `down.sh`. Beside
vLLM stands the engine the learner ran before (`OllamaClass`): the one named with --endpoint, else their own Ollama
where one answers holding a model, else the kit's llama.cpp server. The
quantization section's second vLLM (the other weights) always runs on a free port of its own, and is stopped
as soon as the section is done. Commands run as the user would type them, in the repository's root, with the
tour's environment (KIT_ENV_FILE and exported settings included); their output streams to the console and its
last lines are kept for the section that failed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from client.endpoint import Endpoint, EndpointError, named_endpoints
from labs.compare.workload import targets
from labs.tour.running import run
from serve.config.settings import Settings
from serve.engines import llamacpp, ollama
from serve.processes.process import free_port
from ui.environment import load_env
from ui.progress import console


def shell(command: str, overrides: dict[str, str]) -> list[str]:
    """`VAR=value ... bash up.sh` as the user would type it: said first, then run."""
    typed = " ".join([*(f"{name}={value}" for name, value in overrides.items()), command])
    console.print(f"[bold]tour:[/bold] running [bold]{typed}[/bold]")
    return run(["bash", "-c", command], {**os.environ, **overrides})


def answers(endpoint: Endpoint) -> bool:
    try:
        endpoint.check()
    except EndpointError:
        return False
    return True


# the tour measures an engine as soon as up.sh returns: the compiled one, never an eager stand-in answering while it
# builds (serve/engines/hand_over.py), which would only make the tour wait for the hand-over
MEASURED = {"SERVE_WHILE_COMPILING": "false"}
OLLAMA_URL = "http://127.0.0.1:11434"  # where an Ollama listens unless told otherwise
KIT_MODEL_PARAMETERS = 135e6  # SmolLM2-135M, what vLLM serves
OLLAMA_TAG_SIZE = re.compile(r":(?P<size>\d+(?:\.\d+)?)(?P<unit>[mb])\b", re.IGNORECASE)  # qwen2.5:1.5b, smollm2:135m


@dataclass(frozen=True, slots=True)
class OllamaClass:
    """The engine the tour sets beside vLLM, as what the learner ran before: the kit's llama.cpp server, or their
    own Ollama (or any engine named with --endpoint), and what that choice does to the comparison."""

    name: str  # its column in the labs' results
    endpoint: Endpoint | None  # None: the kit's llama.cpp server, started through up.sh when it does not answer
    described: str  # for the report: which engine, which model, what that means for the comparison

    @property
    def lab_args(self) -> list[str]:
        """How labs.compare and labs.contract are told to put it beside vLLM."""
        if self.endpoint is None:
            return ["--engines", "vllm,llamacpp"]
        return ["--engines", "vllm", "--endpoint", f"{self.name}={self.endpoint.base_url}@{self.endpoint.model}"]

    @property
    def kit_engines(self) -> list[str]:
        """The kit's engines the comparison needs running."""
        return ["vllm", "llamacpp"] if self.endpoint is None else ["vllm"]


def model_note(model: str) -> str:
    """What serving `model` (an Ollama name) does to a comparison with the kit's vLLM."""
    if model == ollama.SAME_MODEL:
        return "the model vLLM serves (SmolLM2-135M-Instruct): engine against engine"
    found = OLLAMA_TAG_SIZE.search(model)
    size = ""
    if found:
        parameters = float(found["size"]) * (1e9 if found["unit"].lower() == "b" else 1e6)
        times = parameters / KIT_MODEL_PARAMETERS
        size = f" ({found['size']}{found['unit'].upper()} parameters: {times:.0f}x the 135M vLLM serves)"
    return (
        f"not the model vLLM serves{size}: the comparison measures the model as much as the engine; "
        f"`ollama pull {ollama.SAME_MODEL}` makes it the same model"
    )


def ollama_class(settings: Settings, spec: str | None) -> OllamaClass:
    """The engine named with --endpoint; else the learner's Ollama, where one answers (on its own port or on
    LLAMACPP_PORT) holding a model (the kit's model when it holds it); else the kit's llama.cpp server."""
    env = load_env()
    if spec:
        (named,) = named_endpoints([spec], env)
        return OllamaClass(
            named.name,
            named,
            f"{named.name} at {named.base_url} (--endpoint), model {named.model}: {model_note(named.model)}",
        )
    for url in dict.fromkeys((OLLAMA_URL, settings.url_for(settings.llamacpp_port))):
        found = ollama.find(url)
        if found is not None and found.models:
            model = ollama.SAME_MODEL if found.holds_same_model else found.models[0]
            endpoint = Endpoint.at("ollama", found.api_url, model, env, url_source="your Ollama")
            return OllamaClass(
                "ollama",
                endpoint,
                f"your Ollama {found.version} at {found.base_url}, model {model}: {model_note(model)}",
            )
    served = llamacpp.served_name(settings)  # the bundled model's Ollama name, or the learner's model's (MODEL_PATH)
    note = (
        model_note(served)
        if served == ollama.SAME_MODEL
        else f"the model vLLM serves ({served}): engine against engine"
    )
    return OllamaClass(
        "llamacpp",
        None,
        f"the kit's llama.cpp server (one request at a time, as Ollama runs llama.cpp by default), model "
        f"{served} as a {llamacpp.gguf_format(settings)}: {note} (no Ollama of yours answered at "
        f"{OLLAMA_URL} holding a model)",
    )


@dataclass(slots=True)
class KitEngines:
    """The kit's engines as the tour found them, which ones it started (and so stops), and the engine beside vLLM."""

    settings: Settings
    beside: OllamaClass
    started: list[str] = field(default_factory=list)  # engine names, in start order

    def endpoint(self, name: str) -> Endpoint:
        (endpoint,) = targets(self.settings, (name,))
        return endpoint

    def ensure(self, names: Sequence[str]) -> list[Endpoint]:
        """Each engine, started through up.sh when it does not answer (said before)."""
        endpoints = []
        for name in names:
            endpoint = self.endpoint(name)
            if answers(endpoint):
                console.print(f"[bold]tour:[/bold] {name} answers at {endpoint.base_url}: using it as it is")
            else:
                console.print(
                    f"[bold]tour:[/bold] {name} does not answer at {endpoint.base_url}: starting it through the "
                    f"kit's up.sh, and stopping it through down.sh when the tour ends"
                )
                shell("bash up.sh", {"ENGINES": name, **MEASURED})
                self.started.append(name)
            endpoints.append(endpoint)
        return endpoints

    def stop_started(self) -> None:
        for name in reversed(self.started):
            console.print(f"[bold]tour:[/bold] stopping {name}, which the tour started")
            shell("bash down.sh", {"ENGINES": name})
        self.started.clear()


@dataclass(slots=True)
class ExtraVllm:
    """A second vLLM on a free port for the length of a `with` block: `QUANTIZATION=... bash up.sh`, then down."""

    quantization: str
    port: int = field(default_factory=free_port)

    @property
    def overrides(self) -> dict[str, str]:
        return {"ENGINES": "vllm", "REPLICAS": "1", "VLLM_PORT": str(self.port)}

    def __enter__(self) -> ExtraVllm:
        console.print(
            f"[bold]tour:[/bold] starting a second vLLM with QUANTIZATION={self.quantization} on port {self.port} "
            "through up.sh (stopped through down.sh right after this section)"
        )
        try:
            shell("bash up.sh", {"QUANTIZATION": self.quantization, **self.overrides, **MEASURED})
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        console.print(f"[bold]tour:[/bold] stopping the second vLLM on port {self.port}")
        shell("bash down.sh", self.overrides)
