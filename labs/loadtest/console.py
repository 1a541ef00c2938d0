"""REPORTING, console: a progress bar while a load point runs, one table row per (endpoint, load point)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from client.stream import RequestRecord
from labs.loadtest.aggregate import Peaks, Summary
from labs.loadtest.runner import RunResult

TABLE_WIDTH_CHARS = 180  # when writing to a file or a pipe, where rich would assume 80 columns
console = Console(highlight=False)
if not console.is_terminal:
    console.width = TABLE_WIDTH_CHARS


@contextmanager
def progress_bar(title: str, total: int) -> Iterator[Callable[[RequestRecord], None]]:
    """Yields the `on_done` callback for run_load: the bar advances as answers end, counting failures."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[outcomes]}"),
    )
    counts: dict[str, int] = {}
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(title, total=total, outcomes="")

        def on_done(record: RequestRecord) -> None:
            counts[record.outcome] = counts.get(record.outcome, 0) + 1
            outcomes = " ".join(f"{name} {count}" for name, count in sorted(counts.items()))
            progress.update(task, advance=1, outcomes=outcomes)

        yield on_done


def _ms(value: float) -> str:
    return "—" if value != value else f"{value:,.0f}"  # NaN: no ok request to measure


def _peaks(result: RunResult) -> str:
    peaks = Peaks.of(result.snapshots)
    return "none" if peaks is None else peaks.describe()


def results_table(results: Sequence[tuple[RunResult, Summary]]) -> Table:
    table = Table(title="Load test (latencies in ms over ok requests)")
    for header in (
        "endpoint",
        "load",
        "ok",
        "trunc",
        "failed",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "ITL p50",
        "E2E p50",
        "E2E p99",
        "queue p99",
        "req/s",
        "out tok/s",
        "/metrics",
    ):
        table.add_column(header, justify="left" if header in ("endpoint", "load", "/metrics") else "right")
    for result, summary in results:
        table.add_row(
            result.target.name,
            result.spec.label,
            str(summary.num_ok),
            str(summary.num_truncated),
            str(summary.num_failed),
            _ms(summary.ttft_ms.median),
            _ms(summary.ttft_ms.p99),
            _ms(summary.tpot_ms.median),
            _ms(summary.itl_ms.median),
            _ms(summary.e2e_ms.median),
            _ms(summary.e2e_ms.p99),
            _ms(summary.queue_ms.p99),
            f"{summary.request_throughput_per_s:.2f}",
            f"{summary.output_tokens_per_s:.1f}",
            _peaks(result),
        )
    return table
