"""Records -> metrics: a pure function, the one place where every load-test metric is defined.

Percentiles are numpy's (linear interpolation), the same as vLLM's serving benchmark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from client.stream import RequestRecord

MS_PER_S = 1000.0

# Each definition, stated once; the console, JSON and HTML reports print these texts.
DEFINITIONS = {
    "ttft_ms": "time to first token: first streamed content chunk minus the moment the request was sent",
    "tpot_ms": "time per output token after the first: (done - first token) / (output tokens - 1), per request",
    "itl_ms": "inter-token latency: the gap between consecutive streamed content chunks, over all chunks",
    "e2e_ms": "end-to-end latency: stream finished minus the moment the request was sent",
    "queue_ms": "client-side queueing: sent minus scheduled (a closed loop or a full concurrency cap waits here)",
    "request_throughput_per_s": "requests that finished ok / duration",
    "output_tokens_per_s": "output tokens actually delivered (usage, ok and truncated answers) / duration",
    "duration_s": "first scheduled arrival to the last answer's end",
    "latency_population": "latencies are over ok requests; truncated and failed ones are only counted",
}


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary statistics of one latency, all in the unit its field name in `Summary` carries."""

    count: int
    mean: float
    median: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        if not values:
            return cls(0, *([float("nan")] * 5))
        array = np.asarray(values, dtype=float)
        p50, p90, p95, p99 = np.percentile(array, [50, 90, 95, 99])
        return cls(len(values), float(array.mean()), float(p50), float(p90), float(p95), float(p99))


@dataclass(frozen=True, slots=True)
class Summary:
    num_requests: int
    num_ok: int
    num_truncated: int
    num_failed: int  # failed, refused or empty answers
    duration_s: float
    total_prompt_tokens: int
    total_output_tokens: int
    request_throughput_per_s: float
    output_tokens_per_s: float
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    queue_ms: Distribution

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def delivered_tokens(record: RequestRecord) -> int:
    """usage.completion_tokens when the engine reported it, else the number of content chunks."""
    if record.output_tokens is not None:
        return record.output_tokens
    return len(record.chunk_times_s)


def duration_s(records: Sequence[RequestRecord]) -> float:
    ends = [record.done_s for record in records if record.done_s is not None]
    if not ends:
        return 0.0
    return max(ends) - min(record.scheduled_s for record in records)


def summarize(records: Sequence[RequestRecord]) -> Summary:
    outcomes = [record.outcome for record in records]  # ok | truncated | empty | failed: one each
    ok = [record for record, outcome in zip(records, outcomes) if outcome == "ok"]
    answered = [record for record, outcome in zip(records, outcomes) if outcome in ("ok", "truncated")]
    num_truncated = outcomes.count("truncated")
    seconds = duration_s(records)
    total_output = sum(delivered_tokens(record) for record in answered)
    ttft, tpot, itl, e2e = [], [], [], []
    for record in ok:
        ttft.append((record.first_token_s - record.sent_s) * MS_PER_S)  # type: ignore[operator]
        e2e.append((record.done_s - record.sent_s) * MS_PER_S)  # type: ignore[operator]
        tokens = delivered_tokens(record)
        if tokens > 1:
            tpot.append((record.done_s - record.first_token_s) / (tokens - 1) * MS_PER_S)  # type: ignore[operator]
        chunks = record.chunk_times_s
        itl.extend((later - earlier) * MS_PER_S for earlier, later in zip(chunks, chunks[1:]))
    queue = [(record.sent_s - record.scheduled_s) * MS_PER_S for record in records if record.sent_s]
    return Summary(
        num_requests=len(records),
        num_ok=len(ok),
        num_truncated=num_truncated,
        num_failed=len(records) - len(ok) - num_truncated,
        duration_s=seconds,
        total_prompt_tokens=sum(record.prompt_tokens or 0 for record in answered),
        total_output_tokens=total_output,
        request_throughput_per_s=len(ok) / seconds if seconds > 0 else 0.0,
        output_tokens_per_s=total_output / seconds if seconds > 0 else 0.0,
        ttft_ms=Distribution.of(ttft),
        tpot_ms=Distribution.of(tpot),
        itl_ms=Distribution.of(itl),
        e2e_ms=Distribution.of(e2e),
        queue_ms=Distribution.of(queue),
    )
