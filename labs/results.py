"""Every lab's results file: one versioned envelope (what wrote it, where, against what, when) around its payload.

Modelled on GuideLLM's report schema: a number in a results file means little without the command that
produced it, the machine it ran on and the engine it measured, and a reader must know which layout it holds.
A file is one JSON object, `{"envelope": {...}, **payload}`: the payload's keys stay at the top level, so a
reader of a lab's own keys (`runs`, `results`, `arms`) reads them where they always were.

Light on purpose (no torch, no vLLM): the teaching engine's plot and the HTML report read through `load`.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import platform
import shlex
import tomllib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from serve.config.machine import detect, isa_label

SCHEMA_VERSION = 1  # raise it when a field changes meaning or goes away; `load` refuses other versions
ENVELOPE_KEY = "envelope"
DISTRIBUTION = "vllm-lab-kit"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
CPUINFO = Path("/proc/cpuinfo")
GIB = 2**30
# The instruction sets that decide which kernels vLLM's CPU backend and llama.cpp can use (x86, then arm64)
ISA_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "bf16",
)


class ResultsError(ValueError):
    """A results file this kit cannot read; the message (one line) says why and what to do."""


def kit_version() -> str:
    """The installed package's version; from pyproject.toml where the kit runs from a checkout (.kit's venv)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def command_line(program: str, argv: list[str]) -> str:
    """How to run it again: `python -m labs.loadtest --rate 5` (argv as the lab's parser received it)."""
    return f"{program} {shlex.join(argv)}".strip()


def _cpu_model() -> str:
    try:
        for line in CPUINFO.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True, slots=True)
class MachineFacts:
    """The machine the numbers came from, as serve/config/machine.py detects it (cores this process may use).

    None where it was not recorded: a file transcribed from an earlier run's printed tables (labs/measured/)
    knows the CPU, its ISA and its cores, not always the memory free or the Python that ran it."""

    cpu_model: str
    usable_cores: int
    physical_cores: int | None
    memory_available_bytes: int | None
    isa_flags: tuple[str, ...]  # those of ISA_FLAGS the CPU has
    platform: str | None
    python: str | None
    memory_total_bytes: int | None = None

    @property
    def isa(self) -> str:
        """AVX-512 + AMX, AVX-512 (+ BF16), AVX2: what decides the engines' kernels, as the pages name it."""
        return isa_label(self.isa_flags)

    def describe(self) -> str:
        """One line a reader can place: CPU, cores, memory, ISA and its flags (what was recorded of them)."""
        cores = f"{self.usable_cores} usable cores" + (
            f" ({self.physical_cores} physical)" if self.physical_cores else ""
        )
        memory = [
            f"{amount / GIB:.1f} GiB {what}"
            for amount, what in ((self.memory_total_bytes, "in all"), (self.memory_available_bytes, "free"))
            if amount is not None
        ]
        flags = " ".join(self.isa_flags) or "no listed SIMD flags"
        return ", ".join([self.cpu_model, cores, *memory, f"{self.isa} ({flags})"])

    @classmethod
    def detect(cls) -> MachineFacts:
        machine = detect()
        return cls(
            cpu_model=_cpu_model(),
            usable_cores=machine.usable_cores,
            physical_cores=machine.physical_cores,
            memory_available_bytes=machine.memory_available_bytes,
            isa_flags=tuple(flag for flag in ISA_FLAGS if flag in machine.cpu_flags),
            platform=platform.platform(),
            python=platform.python_version(),
            memory_total_bytes=psutil.virtual_memory().total,
        )


@dataclass(frozen=True, slots=True)
class MeasuredEngine:
    """One engine the numbers measure, as far as the lab knows it."""

    model: str
    base_url: str | None = None  # None: in-process (the teaching engine)
    kind: str | None = None  # vllm, llamacpp, ollama, teaching-engine; None when the lab cannot tell
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Envelope:
    schema_version: int
    kit_version: str
    command: str
    machine: MachineFacts
    engines: tuple[MeasuredEngine, ...] = ()
    created_utc: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @classmethod
    def now(cls, command: str, engines: tuple[MeasuredEngine, ...] | list[MeasuredEngine] = ()) -> Envelope:
        """The envelope for results produced here, now."""
        return cls(SCHEMA_VERSION, kit_version(), command, MachineFacts.detect(), tuple(engines))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Envelope:
        machine = dict(raw["machine"], isa_flags=tuple(raw["machine"]["isa_flags"]))
        return cls(
            schema_version=raw["schema_version"],
            kit_version=raw["kit_version"],
            command=raw["command"],
            machine=MachineFacts(**machine),
            engines=tuple(MeasuredEngine(**item) for item in raw["engines"]),
            created_utc=raw["created_utc"],
        )


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a metric with no sample is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def write(path: Path, envelope: Envelope, payload: dict[str, Any]) -> Path:
    """Write `payload` with its envelope as one JSON object; the folder is made if missing."""
    if ENVELOPE_KEY in payload:
        raise ValueError(f"a results payload may not have its own {ENVELOPE_KEY!r} key: rename it")
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {ENVELOPE_KEY: envelope.to_dict(), **payload}
    path.write_text(json.dumps(finite(document), indent=2, allow_nan=False) + "\n")
    return path


def load(path: Path) -> tuple[Envelope, dict[str, Any]]:
    """The envelope and the payload of a results file; ResultsError (one line) for anything else."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror or exc.__class__.__name__}") from None
    except ValueError:
        raise ResultsError(f"{path} is not JSON: give a results file a lab wrote") from None
    raw = document.get(ENVELOPE_KEY) if isinstance(document, dict) else None
    if not isinstance(raw, dict):
        raise ResultsError(
            f"{path} has no results envelope (written by an older kit, or not a lab's results): "
            "run the lab again to write it"
        )
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise ResultsError(
            f"{path} has results schema version {raw.get('schema_version')!r} and this kit reads "
            f"version {SCHEMA_VERSION}: run the lab again, or read it with the kit that wrote it"
        )
    try:
        envelope = Envelope.from_dict(raw)
    except (KeyError, TypeError) as exc:
        raise ResultsError(
            f"{path} has a broken results envelope ({exc.__class__.__name__}: {exc}): run the lab again to write it"
        ) from None
    return envelope, {key: value for key, value in document.items() if key != ENVELOPE_KEY}
