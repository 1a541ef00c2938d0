"""The configurations a throughput benchmark compares ("arms"), and bringing each one up and down.

An arm is an engine plus settings overrides on top of the kit's own settings (`.env`, the environment),
so an arm is exactly what a user gets by putting those lines in `.env`. Each started arm gets free ports
and is stopped before the next one starts: only one engine uses the CPUs at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from client.endpoint import EndpointError
from serve.config.machine import ISA_CAPS, ISA_ENV
from serve.config.settings import KNOBS, PORT_FIELDS, Settings
from serve.config.sizing import V1_CPU_BLOCK_SIZE
from serve.engines.runtimes import ENGINES, running
from serve.processes.process import free_port
from ui.environment import load_env
from ui.progress import StepFailed, fail
from ui.values import SettingsError

T = TypeVar("T")

SLOTS = "LLAMA_SERVER_SLOTS"
RESERVED_CPUS = "VLLM_CPU_NUM_OF_RESERVED_CPU"  # vLLM's own: 0 binds its compute threads to every core
# How an arm's engine runs, whatever .env says: one native process tree (its pid is what step_profile samples).
ONE_NATIVE_ENGINE = {"RUNTIME": "native", "REPLICAS": "1"}
NO_COMPILE_STEP = "no compile step"  # a start's compile cache, for an engine that compiles nothing


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
            ("QUANTIZATION", "none"),
            ("VLLM_ENABLE_V1_MULTIPROCESSING", "true"),
            ("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            ("OMP_THREADS", "auto"),
            ("BLOCK_SIZE", str(V1_CPU_BLOCK_SIZE)),
            ("ZENTORCH", "false"),
            ("CPP_WRAPPER", "false"),
        ),
        "vLLM out of the box: float32 weights, its worker process, its own thread binding (one core computes, one "
        f"reserved), {V1_CPU_BLOCK_SIZE}-token blocks, no zentorch, inductor's Python wrapper",
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
        (("LLAMACPP_NUM_PARALLEL", "1"),),
        "the Ollama-class engine: llama.cpp's server, Q4_1 GGUF, one slot: requests wait their turn (Ollama's default)",
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
class RunningArm:
    """A healthy engine for one arm: where to send requests and what the bandwidth ceiling needs."""

    api_url: str
    model: str
    weight_bytes: int
    max_sequences_per_step: int
    resolved: dict[str, Any]
    starts: list[Start] = field(default_factory=list)
    pid: int | None = None  # the server's process, where this benchmark started it
    log_path: Path | None = None  # its log, where this benchmark started it


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


def arm_settings(arm: Arm) -> Settings:
    """The kit's settings with the arm's overrides, one native engine (ONE_NATIVE_ENGINE), on ports nobody uses
    (every engine's port setting; SettingsError names a bad value)."""
    env = {**load_env(), **dict(arm.overrides), **ONE_NATIVE_ENGINE}
    if arm.attach_url is None:
        env |= {port_setting: str(free_port()) for port_setting in PORT_FIELDS}
    return Settings.from_env(env)


@contextmanager
def serving(arm: Arm, restarts: int = 0) -> Iterator[RunningArm]:
    """Bring the arm's engine up (then, for an engine that compiles, stop and start it `restarts` more times), yield
    it, stop it: each start runtimes.running's. Its Engine says what runs it, what a decode step reads (as the plan
    it started with) and what a start compiled."""
    settings = arm_settings(arm)
    engine = ENGINES[arm.engine]
    (runtime,) = engine.runtimes(settings)  # one native engine (arm_settings)
    if arm.attach_url is not None:
        step = engine.decode_step(settings, None)
        yield RunningArm(arm.attach_url, runtime.served_model, step.weight_bytes, step.max_sequences, step.facts)
        return
    runtime.install()  # before its preflight: the plan sizes the weights the install prepares
    starts: list[Start] = []
    for attempt in range(restarts + 1 if engine.compile_cache else 1):
        with running([runtime], environ=engine_environ(arm)) as (started,):
            compiled = NO_COMPILE_STEP
            if engine.compile_cache is not None:
                compiled = engine.compile_cache(runtime.log_path.read_text(errors="replace"), settings)
            starts.append(Start(started.seconds_to_healthy, compiled))
            if attempt == restarts or engine.compile_cache is None:
                step = engine.decode_step(settings, started.plan)
                url = f"{runtime.base_url}/v1"
                yield RunningArm(
                    url,
                    runtime.served_model,
                    step.weight_bytes,
                    step.max_sequences,
                    step.facts,
                    starts,
                    started.pid,
                    runtime.log_path,
                )


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def guarded(run: Callable[[], T]) -> T:
    """`run()` with Ctrl-C and `kill` turned into KeyboardInterrupt (even in the background, where SIGINT is ignored),
    so that every engine it started is stopped on the way out, and its errors one line each: bad input exits 2, a
    step or an engine that failed 1, an interrupt 130."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupt)
    try:
        return run()
    except (ValueError, SettingsError) as exc:
        fail(str(exc), code=2)
    except (StepFailed, EndpointError) as exc:
        fail(str(exc), code=1)
    except KeyboardInterrupt:
        fail("interrupted; every engine this run started was stopped", code=130)
