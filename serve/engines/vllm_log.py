"""What vLLM's own log says about a start: the phase it is in now (the progress line `up.sh` shows while it
waits), when each phase began (benchmarks/starts.py), and what the start compiled (a warm start loads its
compile cache: patches/native/).

vLLM's own progress lines read as alarms on a first start: while its worker compiles, the engine core logs "No
available shared memory broadcast block found in 60 seconds. This typically happens when some processes are
hanging ..." every minute, and a bfloat16 engine warns once per weight that it loads the float32 checkpoint into
bfloat16 parameters (the prepared checkpoint is float32: serve/install/prepare_model.py; the narrowing is what
DTYPE asked for). So the wait shows the phase by name with its seconds so far, never such a line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from serve.config.settings import Settings


@dataclass(frozen=True, slots=True)
class Phase:
    """A stretch of a start that begins with the first log line holding `marker`."""

    name: str  # short, for a results file: "weights", "compile"
    marker: str  # a substring of the vLLM 0.32 line that begins it
    doing: str  # what the wait says meanwhile


# Each `doing` is short: the progress line shows 80 characters on a terminal, 100 off one (ui/progress.py).
# In the order a vLLM 0.32 start on CPU logs them (read in .kit/logs); a phase a start skips is never seen: an
# eager engine compiles nothing, a warm one loads the compiled model where a cold one compiles it.
PHASES = (
    Phase("engine", "Initializing a V1 LLM engine", "starting the engine core and its worker"),
    Phase("weights", "Starting to load model", "loading the weights"),
    Phase("compile", "Warming up model for the compilation", "compiling the model for this CPU"),
    Phase("cache-load", "Directly load AOT compilation", "loading the compiled model from the compile cache"),
    Phase("first-run", "saved AOT compiled function", "running the compiled model once"),
    Phase("kv-cache", "KV cache size", "allocating the KV cache, running the model on it"),
    Phase("http", "init engine (profile, create kv cache, warmup model) took", "starting the HTTP server"),
)
BEFORE_ENGINE = "starting the API server (importing torch and vLLM)"
COMPILE_WHY = "once per setting"  # later starts load it from the compile cache
NARROWED = re.compile(
    r"Attempted to load weight \S+ with dtype torch\.float32 into parameter with dtype torch\.bfloat16"
)
NARROWED_NOTE = "float32 into bfloat16, as DTYPE says"  # vLLM warns once per weight
# "(EngineCore pid=1) INFO 12-03 13:02:11 [core.py:98] ..." (the year is not written)
STAMP = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d)\b")
# What vLLM's log says about the compile cache at start, in the order they are checked.
COMPILE_CACHE_LOG = (
    ("Directly load AOT compilation", "loaded from the compile cache"),
    ("due to a load failure", "recompiled: the compile cache failed to load"),
    ("saved AOT compiled function", "compiled (no cache yet)"),
)


def current_phase(log_text: str) -> Phase | None:
    """The latest phase the log has reached (by where its line stands in the log); None before the first."""
    found = [(log_text.rfind(phase.marker), phase) for phase in PHASES]
    reached = [(at, phase) for at, phase in found if at >= 0]
    return max(reached, key=lambda pair: pair[0])[1] if reached else None


@dataclass(slots=True)
class StartProgress:
    """The progress line of a start, from its log: the phase by name and how long it has run so far."""

    clock: Callable[[], float] = time.monotonic  # a test passes its own
    _since: dict[str, float] = field(default_factory=dict)

    def describe(self, log_text: str) -> str:
        now = self.clock()
        phase = current_phase(log_text)
        key = phase.name if phase else ""
        since = self._since.setdefault(key, now)
        doing = phase.doing if phase else BEFORE_ENGINE
        if phase is not None and phase.name == "compile":
            doing = f"{doing} ({COMPILE_WHY})"
        if phase is not None and phase.name == "weights" and NARROWED.search(log_text):
            doing = f"{doing} ({NARROWED_NOTE})"
        return f"{doing}: {now - since:.0f} s so far"


def phase_starts(log_text: str, year: int) -> dict[str, datetime]:
    """When each phase began, by the timestamp of its first line (vLLM writes whole seconds and no year)."""
    starts: dict[str, datetime] = {}
    for line in log_text.splitlines():
        stamp = STAMP.search(line)
        if stamp is None:
            continue
        for phase in PHASES:
            if phase.name not in starts and phase.marker in line:
                starts[phase.name] = datetime.strptime(f"{year}-{stamp[1]}", "%Y-%m-%d %H:%M:%S")
    return starts


def compile_cache_state(log_text: str, settings: Settings) -> str:
    """What a start compiled, from its log (COMPILE_CACHE_LOG); nothing with ENFORCE_EAGER."""
    if settings.enforce_eager:
        return "eager: nothing compiled"
    return next((state for marker, state in COMPILE_CACHE_LOG if marker in log_text), "unknown")


# Where vLLM 0.32 keeps the compiled model a start saved or loaded (benchmarks/step_ops.py counts its ops)
COMPILED_AT = re.compile(r"(?:Directly load AOT compilation from path|saved AOT compiled function to) (\S+)")


def compiled_artifact(log_text: str) -> str | None:
    """The compiled model's path, as the start's log names it; None for a start that compiled nothing."""
    found = COMPILED_AT.findall(log_text)
    return found[-1] if found else None
