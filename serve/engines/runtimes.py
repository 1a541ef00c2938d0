"""Which runtimes serve ENGINES, and for vLLM which one: RUNTIME=auto picks Docker only when an engine with
Compose (v2 or v1) answers; REPLICAS above 1 is N native engines behind vllm-router (serve/engines/replicas.py).

What `up` started is recorded (.kit/run/PORT.json, serve/processes/run_record.py), so that with RUNTIME=auto, `down`
and `status` act on the runtime that started it instead of deciding again: a Docker engine started after a native `up`
must not make `down` look in Docker and leave vLLM holding the port. With no record (an older kit's `up`, a
cleared .kit/run), `down` looks at both the native pidfile and, when an engine answers, the Docker container:
guessing one would leave the other running (vllm_to_stop).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from serve.config.model import MODEL_DIR
from serve.config.settings import ENGINE_NAMES, Settings
from serve.engines import compose, llama_server, llamacpp, native, replicas, vllm_log
from serve.engines.docker import CPU, TRACKS, DockerRuntime
from serve.engines.native import NativeRuntime
from serve.engines.router import RouterRuntime
from serve.engines.runtime import Engine, Job, Runtime, Started
from serve.processes import run_record
from ui.values import SettingsError

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


def recorded(settings: Settings) -> str | None:
    """The runtime the last `up` started vLLM with on VLLM_PORT (its record, alive or not: after a crash `down` still
    stops what is left of it), when RUNTIME=auto could have picked it; else None."""
    record = run_record.read_quietly(settings.port)
    if record is None or record.engine != "vllm" or record.runtime not in AUTO_CHOICES:
        return None
    return record.runtime


def select(settings: Settings) -> Runtime:
    """RUNTIME as set; `auto` is the runtime recorded as having started VLLM_PORT's vLLM, else decided now. With
    `auto`, the runtime says why it was picked (`picked_because`: the start line and the recap show it, the record
    keeps it beside the plan). RUNTIME is no field of the Plan: it is settled before the plan, which the chosen
    runtime's preflight makes against its own limits."""
    choice, why = settings.runtime, ""
    previous = recorded(settings) if choice == "auto" else None
    if previous is not None:
        choice, why = previous, f"the runtime the last up started on port {settings.port} (.kit/run/)"
    elif choice == "auto" and settings.model_path is not None:  # the Docker tracks load MODEL_NAME from the hub
        choice, why = "native", "MODEL_PATH names your own model, which the native runtime serves"
    runtime: Runtime
    if choice == "native":
        runtime = NativeRuntime(settings)
        runtime.picked_because = why
        return runtime
    try:
        found = find_docker()
    except compose.ComposeUnavailable as exc:
        if choice == "auto":
            runtime = NativeRuntime(settings)
            runtime.picked_because = f"no Docker to use: {exc}"
            return runtime
        how = "started it" if settings.runtime == "auto" else "is asked for"
        raise SettingsError(
            f"RUNTIME={choice} is invalid here: it {how}, and it needs a Docker engine with "
            f"Compose (the docker compose plugin, or docker-compose 1.28+), but {exc}. "
            "Start Docker, or set RUNTIME=native"
        ) from None
    runtime = DockerRuntime(settings, TRACKS[CPU.runtime if choice == "auto" else choice], found)
    if settings.runtime == "auto":
        runtime.picked_because = why or (
            f"a Docker engine answers `docker info` and {found.label} is installed; "
            "RUNTIME=native bash up.sh serves without Docker"
        )
    return runtime


def vllm_runtimes(settings: Settings) -> list[Runtime]:
    """vLLM as RUNTIME says; with REPLICAS=N > 1, N native replicas and the router on VLLM_PORT, in start order."""
    if settings.replicas == 1:
        return [select(settings)]
    if settings.runtime not in ("native", "auto"):
        raise SettingsError(
            f"REPLICAS={settings.replicas} is invalid with RUNTIME={settings.runtime}: the kit runs "
            "replicas natively only (for Kubernetes: python -m serve.kube); set RUNTIME=native "
            "or REPLICAS=1"
        )
    ports = replicas.replica_ports(settings)
    engines: list[Runtime] = [
        NativeRuntime(settings, share, port) for share, port in zip(replicas.shares(settings), ports, strict=True)
    ]
    return [
        *engines,
        RouterRuntime(settings, [settings.url_for(port) for port in ports], replicas.metrics_port(settings)),
    ]


def vllm_installs(settings: Settings) -> list[Runtime]:
    """The native vLLM venv and model, whatever RUNTIME says; the router's venv too when REPLICAS > 1."""
    if settings.replicas == 1:
        return [NativeRuntime(settings)]
    return [NativeRuntime(settings), RouterRuntime(settings, [], replicas.metrics_port(settings))]


def vllm_to_stop(settings: Settings) -> list[Runtime]:
    """What `down` stops for vLLM: the runtimes of vllm_runtimes, except for RUNTIME=auto on a port with no
    record of what `up` started there: then the native server and, when an engine answers, the Docker CPU
    container, both (down stops what runs of either and says which). Docker first: down goes in reverse (a
    router before its replicas), so the native server stops first; a container's stop waits for the port,
    which a native server would hold."""
    if settings.runtime != "auto" or settings.replicas != 1 or recorded(settings) is not None:
        return vllm_runtimes(settings)
    native = NativeRuntime(settings)
    try:
        found = find_docker()
    except compose.ComposeUnavailable:
        return [native]
    return [DockerRuntime(settings, CPU, found), native]


def vllm_port_setting(settings: Settings) -> str:
    """The setting vLLM listens on as RUNTIME says, known without asking Docker: the GPU track's (GPU_PORT), else
    VLLM_PORT (native; the CPU track; either of them that RUNTIME=auto picks; the router in front of REPLICAS)."""
    track = TRACKS.get(settings.runtime)
    return track.port_setting if track is not None else NativeRuntime.port_setting


def ports(settings: Settings) -> list[int]:
    """The ports of the engines in ENGINES as these settings start them: what `up` and `down` lock."""
    return [ENGINES[name].port(settings) for name in settings.engines]


VLLM = Engine(
    "vllm",
    port_setting=vllm_port_setting,
    served_model=lambda settings: settings.model_name,
    configured=lambda settings: (
        f"DTYPE={settings.dtype}, QUANTIZATION={settings.quantization}, "
        f"MAX_NUM_SEQS={settings.max_num_seqs or 'auto'}, VLLM_CPU_OMP_THREADS_BIND={settings.omp_threads_bind}"
    ),
    runtimes=vllm_runtimes,
    decode_step=native.decode_step,
    compile_cache=vllm_log.compile_cache_state,
    installs=vllm_installs,
    stops=vllm_to_stop,
)


def registry(*engines: Engine) -> dict[str, Engine]:
    """The engines by name, in the order `up` starts them: exactly those a port setting serves (ENGINE_NAMES,
    which the ENGINES setting accepts), so that no name is accepted without an engine or served without a port."""
    by_name = {engine.name: engine for engine in engines}
    if list(by_name) != list(ENGINE_NAMES):
        raise TypeError(
            f"the registry holds {', '.join(by_name)} but the port settings serve {', '.join(ENGINE_NAMES)}: "
            "give each engine a port setting that serves=NAME (ENGINE_PORTS, ui/environment.py) and register its "
            "Engine here, in the same order"
        )
    return by_name


# Every engine ENGINES may name, in the order `up` starts them.
ENGINES = registry(VLLM, llamacpp.ENGINE, llama_server.ENGINE)


def for_engines(settings: Settings, job: Job = "runtimes") -> list[Runtime]:
    """The runtimes of the engines in ENGINES, in start order, for `job` (Engine.for_job)."""
    return [
        runtime
        for engine in ENGINES.values()
        if engine.name in settings.engines
        for runtime in engine.for_job(job, settings)
    ]


def stop_each(started: list[Runtime], remove_volumes: bool = False) -> list[Runtime]:
    """Stop each runtime, the last started first; the ones that were running. With `remove_volumes`, a native
    server looked at beside the Docker track (RUNTIME=auto with no record) is stopped as it is; alone, it
    is refused (it has no volumes)."""
    beside_docker = any(isinstance(runtime, DockerRuntime) for runtime in started)
    stopped = []
    for runtime in reversed(started):
        plain = beside_docker and not isinstance(runtime, DockerRuntime)
        if runtime.stop() if plain else stop(runtime, remove_volumes):
            stopped.append(runtime)
    return stopped


def stop(runtime: Runtime, remove_volumes: bool = False) -> bool:
    """Stop what this kit started; `remove_volumes` also drops the Docker tracks' model cache."""
    if not remove_volumes:
        return runtime.stop()
    if not isinstance(runtime, DockerRuntime):
        raise SettingsError(
            f"RUNTIME={runtime.name} has no Docker volumes to remove (--volumes is for "
            f"RUNTIME=docker|docker-gpu; the native model lives in {MODEL_DIR})"
        )
    return runtime.stop(remove_volumes=True)


@contextmanager
def exported(env: Mapping[str, str]) -> Iterator[None]:
    """`env` in this process's environment while engines start (their processes inherit it), then as before."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def running(
    started: list[Runtime], *, environ: Mapping[str, str] | None = None, serve_early: bool = False
) -> Iterator[list[Started]]:
    """Start the runtimes in order, each after its preflight (a port in use, the memory, the model: refused in one
    line before it starts), and stop them all, the last first, whatever happens: the one way the benchmarks start
    what settings describe (up.sh is the users' and the tour's). `environ`: what the engines' processes get besides
    the settings (exported while they start); `serve_early`: as Runtime.start. Yields what each start recorded."""
    up: list[Runtime] = []
    records: list[Started] = []
    try:
        for runtime in started:
            with exported(environ or {}):
                records.append(runtime.start(runtime.preflight(), serve_early=serve_early))
            up.append(runtime)
        yield records
    finally:
        for runtime in reversed(up):
            runtime.stop(quiet=True)
