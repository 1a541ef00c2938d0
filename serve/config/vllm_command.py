"""Settings -> the vLLM api_server command line and environment, for every runtime.

`auto` values are resolved here, once, against the machine, and each carries the reason it was chosen
so that `up.sh` can show it in its recap.
"""

from __future__ import annotations

from dataclasses import dataclass

from serve.config.machine import Machine
from serve.config.settings import Settings
from serve.config.sizing import (
    AUTO_CPU_BLOCK_SIZE,
    V1_CPU_BLOCK_SIZE,
    VLLM_CPU_OVERHEAD_BYTES,
    ModelFacts,
    auto_seqs,
    auto_seqs_reason,
    plan_batch,
)

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SWAP_SPACE_REMOVED_IN = (0, 18)  # vLLM 0.18 dropped --swap-space (it never added blocks on CPU)
# Native: the auto KV budget takes at most this share of the RAM available at start (others use the machine).
AUTO_KV_MEMORY_SHARE = 0.5
UNSIZED_KV_GIB = 4  # a model with no local config.json: vLLM's own CPU default (0.9 warns and uses 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """The concrete values behind the `auto` settings, with why each was chosen."""

    dtype: str
    dtype_reason: str
    omp_threads: int
    omp_threads_reason: str
    omp_threads_bind: str
    omp_threads_bind_reason: str
    max_num_seqs: int | None  # None: not passed (the GPU track leaves it to vLLM)
    max_num_seqs_reason: str
    block_size: int | None  # None: not passed (vLLM's own default)
    block_size_reason: str
    kv_block_size: int  # the block size vLLM will use: what the KV sizing counts in
    kv_cache_space_gib: int | None  # None: not passed (the GPU track sizes KV by GPU_MEMORY_UTILIZATION)
    kv_cache_space_reason: str
    multiprocessing: bool = True  # False: vLLM's uni executor, the model in the engine core's process
    multiprocessing_reason: str = "vLLM's own: a worker process runs the model"


def resolve_dtype(settings: Settings, machine: Machine) -> tuple[str, str]:
    if settings.dtype != "auto":
        return settings.dtype, "set in DTYPE"
    if machine.bf16_flag:
        return "bfloat16", f"auto: the CPU has {machine.bf16_flag}"
    return "float32", "auto: the CPU has no BF16 instructions (avx512_bf16/amx_bf16)"


def resolve_threads(settings: Settings, machine: Machine) -> tuple[int, str]:
    """OMP_THREADS: what computes where vLLM does not bind (nobind, llama.cpp)."""
    if settings.omp_threads is not None:
        return settings.omp_threads, "set in OMP_THREADS"
    return machine.usable_cores, f"auto: the {machine.usable_cores} cores this process may use"


def resolve_multiprocessing(settings: Settings, machine: Machine, container: bool = False) -> tuple[bool, str]:
    """VLLM_ENABLE_V1_MULTIPROCESSING as vLLM gets it. False keeps vLLM's uni executor on CPU: the model runs in
    the engine core's process, no worker process, no hand-over queue between them, and no core left to a poller.
    Faster than vLLM's worker process on AVX2, a tie or worse on AVX-512 (measured: labs/throughput.md)."""
    if settings.v1_multiprocessing is not None:
        return settings.v1_multiprocessing, "set in VLLM_ENABLE_V1_MULTIPROCESSING"
    if container:
        return True, "auto: vLLM's own in a container (a worker process runs the model)"
    if machine.isa == "AVX2" and machine.usable_cores > 1:
        return False, (
            "auto: on a CPU with AVX2 and no AVX-512 the model runs in the engine core's process, on every core "
            "(measured faster there: labs/throughput.md)"
        )
    return True, f"auto: vLLM's own on {machine.isa}: a worker process runs the model"


def resolve_binding(
    settings: Settings, machine: Machine, container: bool = False, multiprocessing: bool = True
) -> tuple[str, str]:
    """VLLM_CPU_OMP_THREADS_BIND as vLLM gets it. vLLM's `auto` binds one OpenMP thread per physical core
    and reserves one core: its scheduler process polls busily for the worker (labs/throughput.md)."""
    if settings.omp_threads_bind != "auto":
        return settings.omp_threads_bind, "set in VLLM_CPU_OMP_THREADS_BIND"
    if not multiprocessing:
        return "nobind", "auto: nobind, vLLM binds only the worker processes it starts and the uni executor has none"
    if container:
        return "nobind", (
            "auto: nobind in a container (CPU_LIMIT caps CPU time, not CPUs: vLLM's binding "
            "would spread over every host core)"
        )
    if machine.cores < 2:
        return "nobind", "auto: nobind, a single core leaves none to reserve"
    return "auto", (
        f"auto: vLLM's own, {machine.cores - 1} of {machine.cores} cores compute, one is left to "
        "its scheduler and API server"
    )


def resolve_block_size(settings: Settings, engine_block_size: int) -> tuple[int | None, str]:
    """BLOCK_SIZE as passed to vLLM (None: not passed). `engine_block_size` is the engine's own default."""
    if settings.block_size is not None:
        return settings.block_size, "set in BLOCK_SIZE"
    if engine_block_size == V1_CPU_BLOCK_SIZE:
        return AUTO_CPU_BLOCK_SIZE, (
            f"auto: {AUTO_CPU_BLOCK_SIZE} on vLLM's CPU backend, faster than its "
            f"default {V1_CPU_BLOCK_SIZE} at 8-16 users"
        )
    return None, f"auto: vLLM's own ({engine_block_size})"


def resolve(
    settings: Settings,
    machine: Machine,
    facts: ModelFacts | None,
    *,
    memory_cap_bytes: int | None = None,
    block_size: int = V1_CPU_BLOCK_SIZE,
    container: bool = False,
) -> Resolved:
    """Every `auto` against this machine. `facts` is the served model (None: unknown, KV not sized);
    `memory_cap_bytes` the memory the engine may use (a container's cap; default: a share of what is free);
    `block_size` the engine's own default block size (vLLM V1 on CPU: 128, V0: 16)."""
    dtype, dtype_reason = resolve_dtype(settings, machine)
    blocks, blocks_reason = resolve_block_size(settings, block_size)
    kv_block_size = blocks or block_size
    multiprocessing, multiprocessing_reason = resolve_multiprocessing(settings, machine, container)
    bind, bind_reason = resolve_binding(settings, machine, container, multiprocessing)
    if bind == "auto":  # vLLM sets OMP_NUM_THREADS itself: one per core it binds
        threads, threads_reason = machine.cores - 1, f"binding {bind_reason}"
    elif not multiprocessing and settings.omp_threads is None:
        threads = machine.usable_cores
        threads_reason = f"auto: all {threads} cores this process may use: no worker process to wait on"
    elif bind == "nobind" and settings.omp_threads is None and machine.usable_cores > 1:
        threads = machine.usable_cores - 1
        threads_reason = (
            f"auto: {threads} of the {machine.usable_cores} cores this process may use, one left to the "
            "scheduler and API server, as vLLM's own binding leaves"
        )
    else:
        threads, threads_reason = resolve_threads(settings, machine)

    def resolved(max_num_seqs: int, max_num_seqs_reason: str, kv_gib: int, kv_reason: str) -> Resolved:
        return Resolved(
            dtype=dtype,
            dtype_reason=dtype_reason,
            omp_threads=threads,
            omp_threads_reason=threads_reason,
            omp_threads_bind=bind,
            omp_threads_bind_reason=bind_reason,
            max_num_seqs=max_num_seqs,
            max_num_seqs_reason=max_num_seqs_reason,
            block_size=blocks,
            block_size_reason=blocks_reason,
            kv_block_size=kv_block_size,
            kv_cache_space_gib=kv_gib,
            kv_cache_space_reason=kv_reason,
            multiprocessing=multiprocessing,
            multiprocessing_reason=multiprocessing_reason,
        )

    cores = machine.usable_cores
    if facts is None:  # the model unknown: MAX_NUM_SEQS and the KV budget as set, or their unsized defaults
        return resolved(
            settings.max_num_seqs or auto_seqs(cores),
            "set in MAX_NUM_SEQS" if settings.max_num_seqs else auto_seqs_reason(cores),
            settings.kv_cache_space_gib or UNSIZED_KV_GIB,
            "set in VLLM_CPU_KVCACHE_SPACE"
            if settings.kv_cache_space_gib
            else f"auto: no local config.json for {settings.model_name} to size from, so vLLM's CPU default",
        )
    if memory_cap_bytes is None:
        memory_cap_bytes = int(machine.memory_available_bytes * AUTO_KV_MEMORY_SHARE)
    room = memory_cap_bytes - facts.weight_bytes(dtype) - VLLM_CPU_OVERHEAD_BYTES
    plan = plan_batch(
        facts,
        dtype,
        settings.max_model_len,
        cores,
        room,
        settings.max_num_seqs,
        settings.kv_cache_space_gib,
        kv_block_size,
    )
    return resolved(plan.max_num_seqs, plan.max_num_seqs_reason, plan.kv_space_gib, plan.kv_space_reason)


def parse_version(text: str) -> tuple[int, int]:
    """'0.32.0' or '0.9.1.post2' -> (0, 32) / (0, 9): the parts that decide which flags exist."""
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def vllm_args(
    settings: Settings,
    resolved: Resolved,
    model: str,
    vllm_version: tuple[int, int],
    port: int | None = None,
    host: str | None = None,
) -> list[str]:
    """api_server flags; `port`/`host` override the settings where a container maps them."""
    args = [
        "--model",
        model,
        "--served-model-name",
        settings.model_name,
        "--host",
        host or settings.host,
        "--port",
        str(port or settings.port),
        "--dtype",
        resolved.dtype,
        "--max-model-len",
        str(settings.max_model_len),
    ]
    if resolved.max_num_seqs is not None:
        args += ["--max-num-seqs", str(resolved.max_num_seqs)]
    if resolved.block_size is not None:
        args += ["--block-size", str(resolved.block_size)]
    if vllm_version < SWAP_SPACE_REMOVED_IN:
        args += ["--swap-space", str(settings.swap_space_gib)]
    return (
        args + auth_args(settings) + (["--enforce-eager"] if settings.enforce_eager else []) + list(settings.extra_args)
    )


# vLLM checks VLLM_API_KEY only under /v1 (0.9.1) or /v1, /v2, /inference, /cohere (0.32): /invocations and
# /tokenize answer without it. With a key set, the kit's middleware (serve/engine_plugins/kit_auth.py, on the
# engine's PYTHONPATH natively and in the image) requires it on every route but probes and /metrics.
AUTH_MIDDLEWARE = "kit_auth.RequireKeyEverywhere"


def auth_args(settings: Settings) -> list[str]:
    return ["--middleware", AUTH_MIDDLEWARE] if settings.api_key else []


# The kit's VLLM_PORT is the API's port; vLLM reads a variable of that name as the base of its own internal
# ports ("not the port of the API server", its docs), so an exported VLLM_PORT must not reach the engine.
KIT_ONLY_ENV = ("VLLM_PORT",)


def engine_base_env(environ: dict[str, str]) -> dict[str, str]:
    """The process environment the engine inherits, less the kit's own variables that vLLM reads otherwise."""
    return {key: value for key, value in environ.items() if key not in KIT_ONLY_ENV}


def vllm_env(settings: Settings, resolved: Resolved) -> dict[str, str]:
    """Environment for the engine. The API key travels here, never on the command line (`ps` shows argv)."""
    env = {
        "VLLM_CPU_OMP_THREADS_BIND": resolved.omp_threads_bind,
        "OMP_NUM_THREADS": str(resolved.omp_threads),
        "OPENBLAS_NUM_THREADS": str(settings.openblas_threads),
        # torch's CPU build sizes its intra-op pool from MKL_NUM_THREADS where it is set (MKL_NUM_THREADS=1 with
        # OMP_NUM_THREADS=2: torch.get_num_threads() is 1), so it follows the OpenMP threads unless set
        "MKL_NUM_THREADS": str(settings.mkl_threads or resolved.omp_threads),
        # CPU: 0 keeps vLLM's UniProc executor (no worker process to spawn and import torch into)
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if resolved.multiprocessing else "0",
    }
    if resolved.kv_cache_space_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(resolved.kv_cache_space_gib)
    if settings.api_key:
        env["VLLM_API_KEY"] = settings.api_key
    return env
