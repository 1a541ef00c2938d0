"""Settings and a plan -> the vLLM api_server command line and environment, for every runtime."""

from __future__ import annotations

from serve.config.plan import Plan
from serve.config.settings import Settings

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SWAP_SPACE_REMOVED_IN = (0, 18)  # vLLM 0.18 dropped --swap-space (it never added blocks on CPU)


def parse_version(text: str) -> tuple[int, int]:
    """'0.32.0' or '0.9.1.post2' -> (0, 32) / (0, 9): the parts that decide which flags exist."""
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def vllm_args(
    settings: Settings,
    resolved: Plan,
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


def vllm_env(settings: Settings, resolved: Plan) -> dict[str, str]:
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
