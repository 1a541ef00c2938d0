"""Settings -> the vLLM api_server command line and environment, for every runtime.

`auto` values are resolved here, once, against the machine, and each carries the reason it was chosen
so that `up.sh` can show it in its recap.
"""

from __future__ import annotations

from dataclasses import dataclass

from serve.machine import Machine
from serve.settings import Settings

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SWAP_SPACE_REMOVED_IN = (0, 18)  # vLLM 0.18 dropped --swap-space (it never added blocks on CPU)


@dataclass(frozen=True, slots=True)
class Resolved:
    """The concrete values behind the `auto` settings, with why each was chosen."""

    dtype: str
    dtype_reason: str
    omp_threads: int
    omp_threads_reason: str


def resolve(settings: Settings, machine: Machine) -> Resolved:
    if settings.dtype != "auto":
        dtype, dtype_reason = settings.dtype, "set in DTYPE"
    elif machine.bf16_flag:
        dtype, dtype_reason = "bfloat16", f"auto: the CPU has {machine.bf16_flag}"
    else:
        dtype, dtype_reason = "float32", "auto: the CPU has no BF16 instructions (avx512_bf16/amx_bf16)"
    if settings.omp_threads != "auto":
        threads, threads_reason = int(settings.omp_threads), "set in OMP_THREADS"
    else:
        threads = machine.usable_cores
        threads_reason = f"auto: the {threads} cores this process may use"
    return Resolved(dtype, dtype_reason, threads, threads_reason)


def parse_version(text: str) -> tuple[int, int]:
    """'0.32.0' or '0.9.1.post2' -> (0, 32) / (0, 9): the parts that decide which flags exist."""
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def vllm_args(settings: Settings, resolved: Resolved, model: str, vllm_version: tuple[int, int],
              port: int | None = None, host: str | None = None) -> list[str]:
    """api_server flags; `port`/`host` override the settings where a container maps them."""
    args = [
        "--model", model,
        "--served-model-name", settings.model_name,
        "--host", host or settings.host,
        "--port", str(port or settings.port),
        "--dtype", resolved.dtype,
        "--max-model-len", str(settings.max_model_len),
        "--max-num-seqs", str(settings.max_num_seqs),
    ]
    if vllm_version < SWAP_SPACE_REMOVED_IN:
        args += ["--swap-space", str(settings.swap_space_gib)]
    if settings.enforce_eager:
        args.append("--enforce-eager")
    return args + list(settings.extra_args)


def vllm_env(settings: Settings, resolved: Resolved) -> dict[str, str]:
    """Environment for the engine. The API key travels here, never on the command line (`ps` shows argv)."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": f"{settings.kv_cache_space_gib:g}",
        "VLLM_CPU_OMP_THREADS_BIND": settings.omp_threads_bind,
        "OMP_NUM_THREADS": str(resolved.omp_threads),
        "OPENBLAS_NUM_THREADS": str(settings.openblas_threads),
        "MKL_NUM_THREADS": str(settings.mkl_threads),
        # CPU: 0 keeps vLLM's UniProc executor (no worker process to spawn and import torch into)
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if settings.v1_multiprocessing else "0",
    }
    if settings.api_key:
        env["VLLM_API_KEY"] = settings.api_key
    return env
