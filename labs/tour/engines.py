"""The engines the tour needs, through the kit's own `up.sh` and `down.sh`, said before it does either.

Policy: an engine that already answers is used as it is and left running; one that does not is started with
`ENGINES=<name> bash up.sh` (the port from the settings) and stopped at the end with the same `down.sh`. The
quantization section's second vLLM (the other weights) always runs on a free port of its own, and is stopped
as soon as the section is done. Commands run as the user would type them, in the repository's root, with the
tour's environment (KIT_ENV_FILE and exported settings included); their output streams to the console and its
last lines are kept for the section that failed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from client.endpoint import Endpoint, EndpointError
from labs.compare.workload import targets
from labs.tour.running import run
from serve.config.settings import Settings
from serve.processes.process import free_port
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


@dataclass(slots=True)
class KitEngines:
    """The kit's engines as the tour found them, and which ones it started (and so stops)."""

    settings: Settings
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
                shell("bash up.sh", {"ENGINES": name})
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
            shell("bash up.sh", {"QUANTIZATION": self.quantization, **self.overrides})
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        console.print(f"[bold]tour:[/bold] stopping the second vLLM on port {self.port}")
        shell("bash down.sh", self.overrides)
