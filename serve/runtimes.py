"""Which runtimes serve ENGINES, and for vLLM which one: RUNTIME=auto picks Docker only when an engine with
Compose (v2 or v1) answers.

What `up` started is recorded (.kit/run/vllm-PORT.runtime), so that with RUNTIME=auto, `down` and `status`
act on the runtime that started it instead of deciding again: a Docker engine started after a native `up`
must not make `down` look in Docker and leave vLLM holding the port.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from serve import compose
from serve.docker import CPU, TRACKS, DockerRuntime
from serve.llama_server import LlamaServerRuntime
from serve.llamacpp import LlamaCppRuntime
from serve.local_server import RUN_DIR
from serve.native import NativeRuntime
from serve.runtime import Runtime
from serve.settings import Settings, SettingsError

DOCKER_PROBE_TIMEOUT_S = 15
AUTO_CHOICES = ("native", CPU.runtime)  # what RUNTIME=auto may pick, so what a record may say


def find_docker() -> compose.Compose:
    """The Compose to drive when `docker info` answers and a Compose does; else ComposeUnavailable saying why."""
    docker = shutil.which("docker")
    if docker is None:
        raise compose.ComposeUnavailable("the docker command is not installed")
    try:
        result = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=DOCKER_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise compose.ComposeUnavailable(f"`docker info` did not answer in {DOCKER_PROBE_TIMEOUT_S} s") from None
    if result.returncode != 0:
        first = (result.stderr or result.stdout).strip().splitlines()[:1]
        raise compose.ComposeUnavailable(f"`docker info` failed ({first[0] if first else f'exit {result.returncode}'})")
    return compose.find(docker)


def docker_unusable_reason() -> str | None:
    """None when a Docker engine and a Compose (plugin or docker-compose >= 1.28) both answer, else what failed."""
    try:
        find_docker()
    except compose.ComposeUnavailable as exc:
        return str(exc)
    return None


def record_path(settings: Settings) -> Path:
    return RUN_DIR / f"vllm-{settings.port}.runtime"


def record(settings: Settings, runtime: Runtime) -> None:
    """Remember which runtime `up` started on VLLM_PORT (only the ones RUNTIME=auto could have picked)."""
    if runtime.engine == "vllm" and runtime.name in AUTO_CHOICES:
        record_path(settings).parent.mkdir(parents=True, exist_ok=True)
        record_path(settings).write_text(runtime.name + "\n")


def recorded(settings: Settings) -> str | None:
    path = record_path(settings)
    name = path.read_text().strip() if path.exists() else None
    return name if name in AUTO_CHOICES else None


def forget(settings: Settings, runtime: Runtime) -> None:
    if runtime.engine == "vllm" and recorded(settings) == runtime.name:
        record_path(settings).unlink(missing_ok=True)


def select(settings: Settings) -> Runtime:
    """RUNTIME as set; `auto` is the runtime recorded as having started VLLM_PORT's vLLM, else decided now."""
    choice = settings.runtime
    if choice == "auto":
        choice = recorded(settings) or "auto"
    if choice == "native":
        return NativeRuntime(settings)
    try:
        found = find_docker()
    except compose.ComposeUnavailable as exc:
        if choice == "auto":
            return NativeRuntime(settings)
        how = "started it" if settings.runtime == "auto" else "is asked for"
        raise SettingsError(f"RUNTIME={choice} is invalid here: it {how}, and it needs a Docker engine with "
                            f"Compose (the docker compose plugin, or docker-compose 1.28+), but {exc}. "
                            "Start Docker, or set RUNTIME=native") from None
    return DockerRuntime(settings, TRACKS[CPU.runtime if choice == "auto" else choice], found)


# Every engine ENGINES may name, in the order `up` starts them: its runtime for these settings.
ENGINES: dict[str, Callable[[Settings], Runtime]] = {"vllm": select, "llamacpp": LlamaCppRuntime,
                                                      "llamaserver": LlamaServerRuntime}
# What `python -m serve install` readies: the native runtime's venv and model, whatever RUNTIME says.
INSTALLS: dict[str, Callable[[Settings], Runtime]] = {**ENGINES, "vllm": NativeRuntime}


def for_engines(settings: Settings, factories: dict[str, Callable[[Settings], Runtime]] = ENGINES) -> list[Runtime]:
    """The runtimes of the engines in ENGINES."""
    return [factory(settings) for engine, factory in factories.items() if engine in settings.engines]


def stop(runtime: Runtime, remove_volumes: bool = False) -> bool:
    """Stop what this kit started; `remove_volumes` also drops the Docker tracks' model cache."""
    if not remove_volumes:
        return runtime.stop()
    if not isinstance(runtime, DockerRuntime):
        raise SettingsError(f"RUNTIME={runtime.name} has no Docker volumes to remove (--volumes is for "
                            "RUNTIME=docker|docker-gpu; the native model lives in .kit/models)")
    return runtime.stop(remove_volumes=True)
