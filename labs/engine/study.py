"""The seed study's results: one `BatchingResult` per (policy, max batch), and its file in the results envelope.

Torch-free on purpose: `labs.engine.experiment` (vLLM venv) writes the file, `labs.engine.plot` (light venv)
reads the same typed rows back through `labs.results.load`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from labs.results import Envelope, ResultsError, load, write

# What a table of the study shows of each BatchingResult, in this order (the teaching engine's report, the tour's)
COLUMNS = (
    "max batch",
    "policy",
    "output tok/s",
    "TTFT p50 ms",
    "TTFT p95 ms",
    "TTFT p99 ms",
    "e2e p99 s",
    "preemptions",
)


@dataclass(frozen=True, slots=True)
class BatchingResult:
    """One scheduling policy at one max batch size, over the whole replayed workload."""

    policy: str
    max_batch_size: int
    num_requests: int
    output_tokens_per_s: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    ttft_p99_ms: float
    e2e_p99_s: float
    num_preemptions: int
    prefix_hit_rate: float
    kv_live_tokens: int
    kv_paged_slots: int
    kv_max_len_slots: int
    kv_max_len_over_paged: float
    num_steps: int
    wall_s: float

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> BatchingResult:
        return cls(**{item.name: raw[item.name] for item in fields(cls)})


@dataclass(frozen=True, slots=True)
class Study:
    envelope: Envelope
    args: dict[str, Any]  # the experiment's command-line options, as it parsed them
    results: list[BatchingResult]


def write_study(path: Path, envelope: Envelope, args: dict[str, Any], results: list[BatchingResult]) -> Path:
    return write(path, envelope, {"args": args, "results": [asdict(result) for result in results]})


def load_study(path: Path) -> Study:
    """The study a run of labs.engine.experiment wrote; ResultsError (one line) for any other file."""
    envelope, payload = load(path)
    try:
        return Study(envelope, payload["args"], [BatchingResult.from_dict(raw) for raw in payload["results"]])
    except (KeyError, TypeError) as exc:
        raise ResultsError(f"{path} is not a study: no {exc} in its results") from None
