"""Serving while the compiled engine builds (SERVE_WHILE_COMPILING): an eager vLLM answers on VLLM_PORT, the compiled
one starts beside it on the same port and takes the port over once it listens, without a failed request.

A start that compiles (settings this machine never started compiled, or a new machine) spends minutes in dynamo and
inductor on a small CPU; an eager start compiles nothing and answers in well under a minute, but decodes slower
under load (labs/measured/starts-eager-avx512-2026-12-06.json). So `up` starts the eager engine first and returns
once it answers; the compiled engine then starts on the same port. The two share the port with SO_REUSEPORT, the
eager one's socket steering every new connection to the compiled one from the moment it listens
(serve/engine_plugins/kit_shared_port.py). The compiled engine's supervisor then lets the eager one finish what it
holds and stops it (serve/processes/supervisor.py, --take-over). Nothing else changes: the port, the run record and
the pidfile are the compiled engine's from the start; `down` stops both, `status` says which answers.
    .kit/run/vllm-eager-PORT.pid, .kit/logs/vllm-eager-PORT.log   the eager engine, while it answers
    ~/.cache/vllm-lab-kit/compiled/KEY      a compiled start with these settings reached /health on this machine

Whether a start serves early is the plan's (serve/config/plan.resolve_serve_while_compiling), recorded with it.
Measurements wait for the hand-over (`wait_for_compiled`): an eager engine's speed is not the kit's.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from serve.config.paths import CACHE_DIR, RUN_DIR
from serve.processes import process
from ui.progress import StepFailed, step

MARKS = CACHE_DIR / "compiled"
COMPILED_NAME = "vllm"  # the engine's own files: .kit/run/vllm-PORT.pid (serve/engines/native.py)
EAGER_NAME = "vllm-eager"  # its files: .kit/run/vllm-eager-PORT.pid, .kit/logs/vllm-eager-PORT.log
SHARED_PORT_MODULE = "kit_shared_port"  # serve/engine_plugins/kit_shared_port.py
SHARED_PORT_VARIABLE = "KIT_SHARED_PORT"
# what a start's compile depends on besides the command line: vLLM's and the kit's variables, the CPU's ISA cap
COMPILE_ENV_PREFIXES = ("VLLM_", "KIT_", "ATEN_", "ONEDNN_", "TORCHINDUCTOR_", "PYTHONPATH")
NOT_COMPILE_FLAGS = {"--host", "--port", "--api-key"}
WAIT_TIMEOUT_S = 900.0


def vllm_compile_cache(env: dict[str, str]) -> Path:
    """Where the engine started with `env` keeps its compiled graphs (VLLM_CACHE_ROOT, else ~/.cache/vllm)."""
    for where in (env, os.environ):
        if where.get("VLLM_CACHE_ROOT"):
            return Path(where["VLLM_CACHE_ROOT"]) / "torch_compile_cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "vllm", "torch_compile_cache")


def compile_key(argv: list[str], env: dict[str, str]) -> str:
    """What identifies a compile: the command line but where it listens, and the environment that shapes the model's
    graph or the code inductor writes."""
    flags, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg.split("=", 1)[0] in NOT_COMPILE_FLAGS:
            skip = "=" not in arg
        else:
            flags.append(arg)
    shaping = {key: value for key, value in env.items() if key.startswith(COMPILE_ENV_PREFIXES)}
    shaping.pop("VLLM_API_KEY", None)
    return hashlib.sha256(json.dumps([flags, sorted(shaping.items())]).encode()).hexdigest()[:24]


def mark_for(argv: list[str], env: dict[str, str]) -> Path:
    return MARKS / compile_key(argv, env)


def compiled_before(argv: list[str], env: dict[str, str]) -> bool:
    """A compiled start with this command and environment reached /health on this machine, and vLLM's compile
    cache is still there (a removed ~/.cache/vllm compiles again)."""
    cache = vllm_compile_cache(env)
    return mark_for(argv, env).exists() and cache.is_dir() and any(cache.iterdir())


def eager_pidfile(port: int, marker: str) -> process.PidFile:
    return process.PidFile(RUN_DIR / f"{EAGER_NAME}-{port}.pid", marker)


def handing_over(port: int, marker: str) -> int | None:
    """The eager engine's process group while it still answers on `port` (the compiled one not yet listening, or
    finishing the requests it holds), else None."""
    return eager_pidfile(port, marker).live_group()


def wait_for_compiled(port: int, marker: str, what: str, timeout_s: float = WAIT_TIMEOUT_S) -> float:
    """Wait until the compiled engine on `port` has taken over from the eager one (at once when none answers there):
    the seconds waited. `what` says what waits, on the progress line."""
    if handing_over(port, marker) is None:
        return 0.0
    began = time.monotonic()
    compiled = process.PidFile(RUN_DIR / f"{COMPILED_NAME}-{port}.pid", marker)
    with step(f"{what} waits for the compiled engine on port {port} to take over from the eager one") as update:
        while handing_over(port, marker) is not None:
            waited = time.monotonic() - began
            if compiled.live_group() is None:
                raise StepFailed(
                    f"the compiled engine on port {port} stopped before it took over (an eager engine answers there, "
                    f"slower under load): see .kit/logs/{COMPILED_NAME}-{port}.log, then bash down.sh and bash up.sh"
                )
            if waited > timeout_s:
                raise StepFailed(
                    f"the compiled engine on port {port} did not take over within {timeout_s:.0f} s; "
                    f"its log: .kit/logs/{COMPILED_NAME}-{port}.log"
                )
            update(f"{waited:.0f} s so far (an eager engine's speed is not the compiled one's)")
            time.sleep(1.0)
    return time.monotonic() - began
