"""The configurations a throughput benchmark compares ("arms"), and bringing each one up and down.

An arm is an engine plus settings overrides on top of the kit's own settings (`.env`, the environment),
so an arm is exactly what a user gets by putting those lines in `.env`. Each started arm gets free ports
and is stopped before the next one starts: only one engine uses the CPUs at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from serve.config.machine import ISA_CAPS, ISA_ENV, detect
from serve.config.model import served_model_facts
from serve.config.settings import KNOBS, Settings, load_env
from serve.config.sizing import V1_CPU_BLOCK_SIZE
from serve.config.vllm_command import Resolved, resolve, resolve_threads
from serve.engines import llama_server
from serve.engines.llama_server import LlamaServerRuntime
from serve.engines.llamacpp import MODEL_ALIAS, LlamaCppRuntime, gguf_path
from serve.engines.native import NativeRuntime
from serve.engines.runtimes import ENGINES
from serve.processes.process import free_port

LLAMACPP_SEQUENCES_PER_STEP = 1  # its server runs one request at a time; the others wait
SLOTS = "LLAMA_SERVER_SLOTS"
RESERVED_CPUS = "VLLM_CPU_NUM_OF_RESERVED_CPU"  # vLLM's own: 0 binds its compute threads to every core
# What vLLM's log says about the compile cache at start, in the order they are checked.
COMPILE_CACHE_LOG = (
    ("Directly load AOT compilation", "loaded from the compile cache"),
    ("due to a load failure", "recompiled: the compile cache failed to load"),
    ("saved AOT compiled function", "compiled (no cache yet)"),
)


@dataclass(frozen=True, slots=True)
class Arm:
    """One configuration: an engine, the settings it changes, and why it is in the comparison."""

    name: str
    engine: str
    overrides: tuple[tuple[str, str], ...] = ()
    why: str = ""
    attach_url: str | None = None  # measure a server that is already running instead of starting one
    slot_per_user: bool = False  # llama-server with as many slots as the run's most users

    def for_users(self, max_users: int) -> Arm:
        """The arm as it runs for a benchmark of up to `max_users` users at once."""
        if not self.slot_per_user:
            return self
        return dataclasses.replace(
            self, overrides=(*self.overrides, (SLOTS, str(max_users))), why=f"{self.why} ({max_users})"
        )

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"arm {self.name!r}: engine {self.engine!r} is unknown; use one of {', '.join(ENGINES)}")


BUILTIN_ARMS = {
    "kit": Arm("kit", "vllm", (), "the kit's defaults, resolved for this machine (.env)"),
    "vllm-defaults": Arm(
        "vllm-defaults",
        "vllm",
        (
            ("DTYPE", "float32"),
            ("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            ("OMP_THREADS", "auto"),
            ("BLOCK_SIZE", str(V1_CPU_BLOCK_SIZE)),
        ),
        "vLLM out of the box: float32, its own thread binding (one core computes, one reserved), "
        f"{V1_CPU_BLOCK_SIZE}-token blocks",
    ),
    "float": Arm("float", "vllm", (("QUANTIZATION", "none"),), "the kit's defaults with the float weights"),
    "int8": Arm(
        "int8",
        "vllm",
        (("QUANTIZATION", "int8"),),
        "the kit's defaults with int8 W8A8 weights (serve/install/quantize.py)",
    ),
    "float-2threads": Arm(
        "float-2threads",
        "vllm",
        (("QUANTIZATION", "none"), (RESERVED_CPUS, "0")),
        "float weights, vLLM's binding on every core (none reserved for its frontend)",
    ),
    "int8-2threads": Arm(
        "int8-2threads",
        "vllm",
        (("QUANTIZATION", "int8"), (RESERVED_CPUS, "0")),
        "int8 weights, vLLM's binding on every core (none reserved for its frontend)",
    ),
    "llamacpp": Arm(
        "llamacpp",
        "llamacpp",
        (("LLAMACPP_INTERRUPT_REQUESTS", "false"),),
        "the Ollama-class engine: llama.cpp's server, Q4_1 GGUF, requests wait their turn",
    ),
    "llamaserver-1": Arm(
        "llamaserver-1",
        "llamaserver",
        ((SLOTS, "1"),),
        "llama.cpp's own llama-server, Q4_1 GGUF, one slot: requests queue (Ollama's default)",
    ),
    "llamaserver-n": Arm(
        "llamaserver-n",
        "llamaserver",
        (),
        "llama.cpp's own llama-server, Q4_1 GGUF, a slot per user, batched continuously",
        slot_per_user=True,
    ),
}


def add_cpu_isa_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpu-isa",
        choices=sorted(ISA_CAPS),
        help="run as on a CPU with only this ISA: the kit's auto settings resolve for it and vLLM runs its "
        "kernels (a stand-in: this machine's bandwidth and cores)",
    )


def use_cpu_isa(isa: str | None) -> None:
    """--cpu-isa: every engine this process starts from now on, and the kit's `auto`, see that CPU."""
    if isa is not None:
        os.environ[ISA_ENV] = isa


def parse_overrides(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    """['DTYPE=float32', 'VLLM_EXTRA_ARGS=--block-size 16'] -> (('DTYPE', 'float32'), ...)."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--arm setting {pair!r} is invalid: write KEY=VALUE, e.g. DTYPE=float32")
        parsed.append((key, value))
    return tuple(parsed)


@dataclass(frozen=True, slots=True)
class Start:
    seconds_to_healthy: float
    compile_cache: str


@dataclass(slots=True)
class Served:
    """A healthy engine for one arm: where to send requests and what the bandwidth ceiling needs."""

    api_url: str
    model: str
    weight_bytes: int
    max_sequences_per_step: int
    resolved: dict[str, Any]
    starts: list[Start] = field(default_factory=list)
    pid: int | None = None  # the server's process, where this benchmark started it


# Environment an arm may hand the engine's processes besides vLLM's own (VLLM_...): the OpenMP runtimes'
# (OMP_PROC_BIND, KMP_BLOCKTIME, GOMP_CPU_AFFINITY) and the dynamic loader's (LD_PRELOAD of an allocator).
ENGINE_ENV_PREFIXES = ("VLLM_", "OMP_", "KMP_", "GOMP_", "LD_PRELOAD")


def engine_environ(arm: Arm) -> dict[str, str]:
    """The arm's overrides that are engine environment variables rather than kit settings (VLLM_USE_SPINLOOP_EXT=1,
    OMP_PROC_BIND=close): they reach the engine's processes only. Any other unknown name is a typo, refused."""
    known = {knob.env for knob in KNOBS}
    extra = {key: value for key, value in arm.overrides if key not in known}
    typos = [key for key in extra if not key.startswith(ENGINE_ENV_PREFIXES)]
    if typos:
        raise ValueError(
            f"arm {arm.name!r}: {', '.join(typos)} is neither a setting of .env.example nor an engine "
            f"environment variable ({', '.join(ENGINE_ENV_PREFIXES)}...): check the spelling"
        )
    return extra


@contextmanager
def exported(env: dict[str, str]) -> Iterator[None]:
    """`env` in this process's environment while the engine starts (its processes inherit it), then as before."""
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


def arm_settings(arm: Arm) -> Settings:
    """The kit's settings with the arm's overrides, on ports nobody uses (SettingsError names a bad value)."""
    env = {**load_env(), **dict(arm.overrides)}
    if arm.attach_url is None:
        env |= {"VLLM_PORT": str(free_port()), "LLAMACPP_PORT": str(free_port()), "LLAMA_SERVER_PORT": str(free_port())}
    return Settings.from_env(env)


def compile_cache_state(log_text: str, settings: Settings) -> str:
    if settings.enforce_eager:
        return "eager: nothing compiled"
    return next((state for marker, state in COMPILE_CACHE_LOG if marker in log_text), "unknown")


def _vllm_facts(settings: Settings) -> tuple[int, Resolved, dict[str, Any]]:
    model = served_model_facts(settings, "native")
    if model is None:  # the native runtime always knows its model (MODEL_PATH's config.json or the bundled one)
        raise ValueError(f"no config.json known for {settings.model_name}: set MODEL_PATH to its checkpoint folder")
    resolved = resolve(settings, detect(), model)
    weight_bytes = model.weight_bytes(resolved.dtype)
    facts = {
        "dtype": resolved.dtype,
        "dtype_reason": resolved.dtype_reason,
        "omp_threads": resolved.omp_threads,
        "omp_threads_bind": resolved.omp_threads_bind,
        "multiprocessing": resolved.multiprocessing,
        "multiprocessing_reason": resolved.multiprocessing_reason,
        "max_num_seqs": resolved.max_num_seqs,
        "max_num_seqs_reason": resolved.max_num_seqs_reason,
        "block_size": resolved.kv_block_size,
        "kv_cache_space_gib": resolved.kv_cache_space_gib,
        "kv_cache_space_reason": resolved.kv_cache_space_reason,
        "max_model_len": settings.max_model_len,
        "enforce_eager": settings.enforce_eager,
        "extra_args": list(settings.extra_args),
    }
    return weight_bytes, resolved, facts


@contextmanager
def serving(arm: Arm, restarts: int = 0) -> Iterator[Served]:
    """Bring the arm's engine up (then stop and start it `restarts` more times), yield it, stop it."""
    settings = arm_settings(arm)
    if arm.engine == "llamaserver":
        yield from _llama_server(arm, settings)
        return
    if arm.engine == "llamacpp":
        weight_bytes = os.path.getsize(gguf_path())
        resolved = {"gguf": os.path.basename(gguf_path()), "threads": resolve_threads(settings, detect())[0]}
        if arm.attach_url:
            yield Served(arm.attach_url, MODEL_ALIAS, weight_bytes, LLAMACPP_SEQUENCES_PER_STEP, resolved)
            return
        llama_cpp = LlamaCppRuntime(settings)
        try:
            served = Served(
                f"{llama_cpp.base_url}/v1",
                MODEL_ALIAS,
                weight_bytes,
                LLAMACPP_SEQUENCES_PER_STEP,
                resolved,
                [Start(llama_cpp.start().seconds_to_healthy, "no compile step")],
            )
            yield served
        finally:
            llama_cpp.stop(quiet=True)
        return
    weight_bytes, plan, resolved = _vllm_facts(settings)
    seqs = plan.max_num_seqs or 1
    if arm.attach_url:
        yield Served(arm.attach_url, settings.model_name, weight_bytes, seqs, resolved)
        return
    runtime = NativeRuntime(settings)
    served = Served(f"{settings.base_url}/v1", settings.model_name, weight_bytes, seqs, resolved)
    try:
        for attempt in range(restarts + 1):
            if attempt:
                runtime.stop(quiet=True)
            with exported(engine_environ(arm)):
                started = runtime.start(plan)
            served.pid = started.pid
            log_text = runtime.log_path.read_text(errors="replace")
            served.starts.append(Start(started.seconds_to_healthy, compile_cache_state(log_text, settings)))
        yield served
    finally:
        runtime.stop(quiet=True)


def _llama_server(arm: Arm, settings: Settings) -> Iterator[Served]:
    """serving() for llama-server: it decodes up to LLAMA_SERVER_SLOTS sequences per step."""
    llama_server.install()  # the GGUF it serves, and the binary
    resolved = {
        "gguf": llama_server.GGUF.name,
        "threads": resolve_threads(settings, detect())[0],
        "slots": settings.llama_server_slots,
        "ctx_size": settings.llama_server_slots * settings.max_model_len,
    }
    weight_bytes = os.path.getsize(llama_server.GGUF)
    if arm.attach_url:
        yield Served(arm.attach_url, MODEL_ALIAS, weight_bytes, settings.llama_server_slots, resolved)
        return
    runtime = LlamaServerRuntime(settings)
    try:
        yield Served(
            f"{runtime.base_url}/v1",
            MODEL_ALIAS,
            weight_bytes,
            settings.llama_server_slots,
            resolved,
            [Start(runtime.start().seconds_to_healthy, "no compile step")],
        )
    finally:
        runtime.stop(quiet=True)
