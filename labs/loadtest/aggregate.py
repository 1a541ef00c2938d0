"""Records -> metrics: pure functions, the one place where every load-test metric is defined and converted.

Percentiles are numpy's (linear interpolation), the same as vLLM's serving benchmark; the teaching engine's
report uses `Distribution` too, so the kit has one percentile. The console, the JSON/CSV files and the HTML
report only present what is computed here (milliseconds, /metrics peaks, vLLM's benchmark field names).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any, overload

import numpy as np

from client.stream import RequestRecord
from serve.processes.metrics import MetricsSnapshot

MS_PER_S = 1000.0
PERCENTILES = (50, 90, 95, 99)
# Our latency names -> `vllm bench serve`'s (its result JSON, saved with --save-result)
VLLM_LATENCY_NAMES = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"}
DELIVERED = ("ok", "truncated")  # the outcomes whose tokens the engine delivered: this load tester's output tokens

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
    "vllm_bench_fields": "each run also carries `vllm bench serve --save-result`'s names for the same numbers: "
    "completed = ok requests, failed = every other request, duration, request_throughput, "
    "output_throughput, total_token_throughput (tokens/s), mean/median/std/p90/p95/p99 of "
    "ttft, tpot, itl and e2el (= e2e) in ms",
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
    std: float  # population standard deviation, as vLLM's benchmark reports it

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        if not values:
            return cls(0, *([float("nan")] * 6))
        array = np.asarray(values, dtype=float)
        p50, p90, p95, p99 = np.percentile(array, PERCENTILES)
        return cls(len(values), float(array.mean()), float(p50), float(p90), float(p95), float(p99), float(array.std()))


@dataclass(frozen=True, slots=True)
class Peaks:
    """What the engine's /metrics showed at its worst during one run."""

    num_samples: int
    max_running: float
    max_waiting: float
    max_kv_usage: float  # a fraction of the KV cache; NaN when the engine reports none
    preemptions: float  # during the run: the counter's last sample minus its first

    @classmethod
    def of(cls, snapshots: Sequence[MetricsSnapshot]) -> Peaks | None:
        """None without a series (no /metrics, or scraping off)."""
        if not snapshots:
            return None
        kv = [snapshot.kv_usage for snapshot in snapshots if snapshot.kv_usage is not None]
        return cls(
            len(snapshots),
            max(snapshot.running for snapshot in snapshots),
            max(snapshot.waiting for snapshot in snapshots),
            max(kv) if kv else float("nan"),
            snapshots[-1].preemptions_total - snapshots[0].preemptions_total,
        )

    def to_dict(self) -> dict[str, float]:
        return {
            "max_running": self.max_running,
            "max_waiting": self.max_waiting,
            "max_kv_usage": self.max_kv_usage,
            "preemptions": self.preemptions,
        }

    def describe(self) -> str:
        """The one wording of the peaks, for the console table and the HTML report alike."""
        return (
            f"running≤{self.max_running:g} waiting≤{self.max_waiting:g} KV≤{self.max_kv_usage:.0%} "
            f"preempted {self.preemptions:g}"
        )


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

    @property
    def total_token_throughput_per_s(self) -> float:
        return (self.total_prompt_tokens + self.total_output_tokens) / self.duration_s if self.duration_s > 0 else 0.0

    def vllm_bench_fields(self) -> dict[str, float | int]:
        """The same numbers under `vllm bench serve`'s result names and units, for tools that read those."""
        fields: dict[str, float | int] = {
            "duration": self.duration_s,
            "completed": self.num_ok,
            "failed": self.num_requests - self.num_ok,
            "total_input_tokens": self.total_prompt_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput_per_s,
            "output_throughput": self.output_tokens_per_s,
            "total_token_throughput": self.total_token_throughput_per_s,
        }
        for ours, theirs in VLLM_LATENCY_NAMES.items():
            distribution: Distribution = getattr(self, ours)
            for stat in ("mean", "median", "std", "p90", "p95", "p99"):
                fields[f"{stat}_{theirs}_ms"] = getattr(distribution, stat)
        return fields


@overload
def ms_between(start_s: float, end_s: float) -> float: ...
@overload
def ms_between(start_s: float | None, end_s: float | None) -> float | None: ...
def ms_between(start_s: float | None, end_s: float | None) -> float | None:
    """end - start in milliseconds; None when either moment never came."""
    return None if start_s is None or end_s is None else (end_s - start_s) * MS_PER_S


def measured(values_ms: Iterable[float | None]) -> list[float]:
    """The latencies whose moments all came (an ok answer has every one; a request never sent has no queue time)."""
    return [value_ms for value_ms in values_ms if value_ms is not None]


def ttft_ms(record: RequestRecord) -> float | None:
    return ms_between(record.sent_s or None, record.first_token_s)


def e2e_ms(record: RequestRecord) -> float | None:
    return ms_between(record.sent_s or None, record.done_s)


def queue_ms(record: RequestRecord) -> float | None:
    """Client-side wait: None for a request never sent."""
    return ms_between(record.scheduled_s, record.sent_s or None)


def delivered_tokens(record: RequestRecord) -> int:
    """One answer's output tokens: usage.completion_tokens when the engine reported it, else the number of content
    chunks (one token each on a server that sends no usage in a stream, llama-cpp-python's)."""
    if record.output_tokens is not None:
        return record.output_tokens
    return len(record.chunk_times_s)


def output_tokens(records: Iterable[RequestRecord], outcomes: Collection[str]) -> int:
    """delivered_tokens summed over the records whose outcome is one of `outcomes`: each caller says which answers
    its output tokens count. This load tester counts DELIVERED (ok and truncated: what the engine sent); the
    compare lab counts ok answers only (what a user can use, labs/compare/aggregate.py)."""
    return sum(delivered_tokens(record) for record in records if record.outcome in outcomes)


def duration_s(records: Sequence[RequestRecord]) -> float:
    ends = [record.done_s for record in records if record.done_s is not None]
    if not ends:
        return 0.0
    return max(ends) - min(record.scheduled_s for record in records)


def summarize(records: Sequence[RequestRecord]) -> Summary:
    outcomes = [record.outcome for record in records]  # ok | truncated | empty | failed: one each
    ok = [record for record, outcome in zip(records, outcomes, strict=True) if outcome == "ok"]
    answered = [record for record, outcome in zip(records, outcomes, strict=True) if outcome in DELIVERED]
    num_truncated = outcomes.count("truncated")
    seconds = duration_s(records)
    total_output = output_tokens(records, DELIVERED)
    ttft, e2e = measured(ttft_ms(record) for record in ok), measured(e2e_ms(record) for record in ok)
    tpot: list[float] = []
    itl: list[float] = []
    for record in ok:
        tokens = delivered_tokens(record)
        after_first_ms = ms_between(record.first_token_s, record.done_s)
        if tokens > 1 and after_first_ms is not None:
            tpot.append(after_first_ms / (tokens - 1))
        chunks = record.chunk_times_s
        itl.extend(ms_between(earlier, later) for earlier, later in pairwise(chunks))
    queue = measured(queue_ms(record) for record in records)  # None for a request never sent
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
