"""From finished sequences to the study's numbers (one pure function), and the console tables.

Definitions, stated once: TTFT = first token time - arrival; e2e = finish time - arrival; output
throughput = all completion tokens / (last finish - first arrival). Times come from the replay clock.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from labs.engine.llm_engine import LLMEngine
from labs.engine.sequence import Sequence
from labs.engine.study import COLUMNS, BatchingResult
from labs.loadtest.aggregate import MS_PER_S, Distribution


def summarize(engine: LLMEngine, seqs: list[Sequence], wall_s: float) -> BatchingResult:
    """Percentiles are the load tester's (`Distribution`): the kit computes them one way."""
    ttfts_ms: list[float] = []
    e2es_s: list[float] = []
    finishes_s: list[float] = []
    for seq in seqs:
        if seq.first_token_s is None or seq.finished_s is None:
            raise ValueError(f"request {seq.seq_id} has not finished: summarize a replay that ran to the end")
        ttfts_ms.append((seq.first_token_s - seq.arrival_s) * MS_PER_S)
        e2es_s.append(seq.finished_s - seq.arrival_s)
        finishes_s.append(seq.finished_s)
    ttft_ms, e2e_s = Distribution.of(ttfts_ms), Distribution.of(e2es_s)
    span_s = max(finishes_s) - min(seq.arrival_s for seq in seqs)
    peak = engine.kv_peak
    return BatchingResult(
        policy=engine.config.policy,
        max_batch_size=engine.config.max_batch_size,
        num_requests=len(seqs),
        output_tokens_per_s=sum(seq.num_completion_tokens for seq in seqs) / span_s,
        ttft_p50_ms=ttft_ms.median,
        ttft_p95_ms=ttft_ms.p95,
        ttft_p99_ms=ttft_ms.p99,
        e2e_p99_s=e2e_s.p99,
        num_preemptions=engine.num_preemptions,
        prefix_hit_rate=engine.prefix_hit_rate,
        kv_live_tokens=peak.live_tokens,
        kv_paged_slots=peak.paged_slots,
        kv_max_len_slots=peak.max_len_slots,
        kv_max_len_over_paged=peak.max_len_over_paged,
        num_steps=engine.num_steps,
        wall_s=wall_s,
    )


def latency_table(results: list[BatchingResult]) -> Table:
    table = Table(title="Static vs continuous batching")
    for header in (*COLUMNS, "prefix hits"):
        table.add_column(header, justify="right")
    for r in results:
        table.add_row(
            str(r.max_batch_size),
            r.policy,
            f"{r.output_tokens_per_s:.1f}",
            f"{r.ttft_p50_ms:.0f}",
            f"{r.ttft_p95_ms:.0f}",
            f"{r.ttft_p99_ms:.0f}",
            f"{r.e2e_p99_s:.2f}",
            str(r.num_preemptions),
            f"{r.prefix_hit_rate:.0%}",
        )
    return table


def speedup_table(results: list[BatchingResult]) -> Table:
    """Continuous over static at each max batch: how many times lower TTFT p50, how much more throughput."""
    table = Table(title="Continuous / static, same max batch")
    for header in ("max batch", "TTFT p50 static/continuous", "throughput continuous/static"):
        table.add_column(header, justify="right")
    by_key = {(r.policy, r.max_batch_size): r for r in results}
    for batch in sorted({r.max_batch_size for r in results}):
        static, continuous = by_key.get(("static", batch)), by_key.get(("continuous", batch))
        if static and continuous:
            table.add_row(
                str(batch),
                f"{static.ttft_p50_ms / continuous.ttft_p50_ms:.1f}x",
                f"{continuous.output_tokens_per_s / static.output_tokens_per_s:.2f}x",
            )
    return table


def kv_table(results: list[BatchingResult], block_size: int, max_model_len: int) -> Table:
    table = Table(title=f"KV slots at the peak (blocks of {block_size}; max_len reservation = {max_model_len})")
    for header in ("max batch", "policy", "live tokens", "paged slots", "max_len slots", "max_len / paged"):
        table.add_column(header, justify="right")
    for r in results:
        table.add_row(
            str(r.max_batch_size),
            r.policy,
            f"{r.kv_live_tokens:,}",
            f"{r.kv_paged_slots:,}",
            f"{r.kv_max_len_slots:,}",
            f"{r.kv_max_len_over_paged:.1f}x",
        )
    return table


def print_report(console: Console, results: list[BatchingResult], block_size: int, max_model_len: int) -> None:
    console.print(latency_table(results))
    console.print(speedup_table(results))
    console.print(kv_table(results, block_size, max_model_len))
