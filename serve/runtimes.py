"""Which runtime serves: RUNTIME=auto picks Docker only when an engine with compose answers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Protocol

from serve.docker import TRACKS, DockerRuntime
from serve.native import NativeRuntime, Started
from serve.settings import Settings, SettingsError
from serve.vllm_command import Resolved

DOCKER_PROBE_TIMEOUT_S = 15


def docker_unusable_reason() -> str | None:
    """None when `docker info` and `docker compose version` both succeed, else what failed."""
    docker = shutil.which("docker")
    if docker is None:
        return "the docker command is not installed"
    for probe in (["info"], ["compose", "version"]):
        try:
            result = subprocess.run([docker, *probe], capture_output=True, text=True,
                                    timeout=DOCKER_PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"`docker {' '.join(probe)}` did not answer in {DOCKER_PROBE_TIMEOUT_S} s"
        if result.returncode != 0:
            first = (result.stderr or result.stdout).strip().splitlines()[:1]
            return f"`docker {' '.join(probe)}` failed ({first[0] if first else f'exit {result.returncode}'})"
    return None


class Runtime(Protocol):
    """What `python -m serve` drives: the native venv or a compose service. Health wait and recap are shared."""

    name: str
    log_path: Path  # the engine's own output: the recap reads the KV-cache line from it

    @property
    def base_url(self) -> str: ...

    def running_pid(self) -> int | None: ...

    def healthy(self) -> bool: ...

    def resolve(self) -> Resolved:
        """Every `auto` setting as this runtime will start with it (the preflight judges these)."""
        ...

    def start(self, resolved: Resolved | None = None) -> Started: ...

    def stop(self, quiet: bool = False) -> bool: ...


def select(settings: Settings) -> Runtime:
    if settings.runtime == "native":
        return NativeRuntime(settings)
    reason = docker_unusable_reason()
    if settings.runtime == "auto":
        return NativeRuntime(settings) if reason is not None else DockerRuntime(settings, TRACKS["docker"])
    if reason is not None:
        raise SettingsError(f"RUNTIME={settings.runtime} is invalid here: it needs a Docker engine with the "
                            f"compose plugin, and {reason}. Start Docker, or set RUNTIME=native")
    return DockerRuntime(settings, TRACKS[settings.runtime])


def stop(runtime: Runtime, remove_volumes: bool = False) -> bool:
    """Stop what this kit started; `remove_volumes` also drops the Docker tracks' model cache."""
    if not remove_volumes:
        return runtime.stop()
    if not isinstance(runtime, DockerRuntime):
        raise SettingsError(f"RUNTIME={runtime.name} has no Docker volumes to remove (--volumes is for "
                            "RUNTIME=docker|docker-gpu; the native model lives in .kit/models)")
    return runtime.stop(remove_volumes=True)
