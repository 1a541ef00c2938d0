"""Aggregation: pure functions from timed phases to the numbers the lab reports, each defined here.

- wall_s: first request sent -> last answer finished, for the whole phase.
- output_tokens: usable output, the phase's *ok* answers only (a truncated, empty or failed answer delivers
  nothing the user can use, so it adds nothing here; it is counted apart). This is not the load tester's
  output tokens, which count truncated answers too: both sum the same per-answer count
  (labs.loadtest.aggregate.output_tokens, told which outcomes count), usage.completion_tokens or, from a
  server that sends no usage in a stream (llama-cpp-python's), the streamed content chunks, one token each
  there; `tokens_source` says which count a phase used.
- output_tokens_per_s: output_tokens / wall_s (aggregate throughput of the phase).
- scaling: matched sequential wall_s / matched concurrent wall_s for one engine (> 1: concurrency helped).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from client.stream import RequestRecord
from labs.compare.run import PhaseRun
from labs.loadtest.aggregate import output_tokens

USABLE = ("ok",)  # the outcomes whose tokens this lab counts: a user can use only an ok answer

SEQUENTIAL = "matched sequential"
CONCURRENT = "matched concurrent"


@dataclass(frozen=True, slots=True)
class PhaseSummary:
    engine: str
    mode: str
    num_requests: int
    wall_s: float
    output_tokens: int
    output_tokens_per_s: float
    num_ok: int
    num_truncated: int
    num_empty: int
    num_failed: int
    mean_e2e_latency_s: float | None
    tokens_source: str  # "usage", "chunks" (no usage sent) or "usage+chunks"
    note: str

    @property
    def num_bad(self) -> int:
        return self.num_truncated + self.num_empty + self.num_failed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tokens_source(records: list[RequestRecord]) -> str:
    sources = {"usage" if record.output_tokens is not None else "chunks" for record in records}
    return "+".join(sorted(sources, reverse=True)) or "usage"


def summarize(run: PhaseRun) -> PhaseSummary:
    outcomes = [record.outcome for record in run.records]
    ok_tokens = output_tokens(run.records, USABLE)
    latencies = [record.done_s - record.sent_s for record in run.records if record.ok and record.done_s]
    wall_s = run.wall_s
    return PhaseSummary(
        engine=run.engine,
        mode=run.mode,
        num_requests=len(run.records),
        wall_s=wall_s,
        output_tokens=ok_tokens,
        output_tokens_per_s=ok_tokens / wall_s if wall_s > 0 else 0.0,
        num_ok=outcomes.count("ok"),
        num_truncated=outcomes.count("truncated"),
        num_empty=outcomes.count("empty"),
        num_failed=outcomes.count("failed"),
        mean_e2e_latency_s=sum(latencies) / len(latencies) if latencies else None,
        tokens_source=tokens_source(run.records),
        note=run.note,
    )


def scaling(summaries: list[PhaseSummary]) -> dict[str, float]:
    """Per engine, matched sequential wall time / matched concurrent wall time (engines with both phases)."""
    walls = {(summary.engine, summary.mode): summary.wall_s for summary in summaries}
    factors = {}
    for engine in dict.fromkeys(summary.engine for summary in summaries):
        sequential, concurrent = walls.get((engine, SEQUENTIAL)), walls.get((engine, CONCURRENT))
        if sequential and concurrent:
            factors[engine] = sequential / concurrent
    return factors
