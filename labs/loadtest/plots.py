"""REPORTING, plots (PNG): latency CDFs, throughput and TTFT against load, the /metrics time series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from labs.loadtest.aggregate import Summary, e2e_ms, measured, ttft_ms
from labs.loadtest.runner import RunResult

DPI = 100
WIDTH_IN = 10.0
PANEL_HEIGHT_IN = 3.2
PERCENT = 100.0


@dataclass(frozen=True, slots=True)
class Plot:
    path: Path
    caption: str


def _name(result: RunResult) -> str:
    return f"{result.target.name} · {result.spec.label}"


def _save(figure: plt.Figure, path: Path, caption: str) -> Plot:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return Plot(path, caption)


def latency_cdfs(results: Sequence[tuple[RunResult, Summary]], path: Path) -> Plot:
    figure, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, PANEL_HEIGHT_IN))
    for result, _ in results:
        ok = [record for record in result.records if record.ok]
        for axis, latency_ms in zip(axes, (ttft_ms, e2e_ms), strict=True):
            values = sorted(measured(latency_ms(record) for record in ok))
            if values:
                axis.step(
                    values,
                    [(index + 1) / len(values) for index in range(len(values))],
                    where="post",
                    label=_name(result),
                )
    for axis, title in zip(axes, ("TTFT (ms)", "E2E latency (ms)"), strict=True):
        axis.set_xlabel(title)
        axis.set_ylabel("fraction of ok requests")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    return _save(figure, path, "Latency CDFs: how many requests got their first token / whole answer within x ms")


def load_curves(results: Sequence[tuple[RunResult, Summary]], path: Path) -> Plot:
    figure, (throughput_axis, ttft_axis) = plt.subplots(1, 2, figsize=(WIDTH_IN, PANEL_HEIGHT_IN))
    endpoints = dict.fromkeys(result.target.name for result, _ in results)
    for endpoint in endpoints:
        points = sorted(
            (result.spec.load_value, summary) for result, summary in results if result.target.name == endpoint
        )
        loads = [load for load, _ in points]
        throughput_axis.plot(loads, [summary.output_tokens_per_s for _, summary in points], "o-", label=endpoint)
        ttft_axis.plot(loads, [summary.ttft_ms.median for _, summary in points], "o-", label=f"{endpoint} p50")
        ttft_axis.plot(loads, [summary.ttft_ms.p99 for _, summary in points], "x--", label=f"{endpoint} p99")
    closed = all(result.spec.closed_loop for result, _ in results)
    for axis, ylabel in ((throughput_axis, "output tokens/s"), (ttft_axis, "TTFT (ms)")):
        axis.set_xlabel("concurrent users" if closed else "offered rate (req/s)")
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    return _save(figure, path, "Throughput and TTFT against load: throughput flattens where TTFT takes off")


def metrics_series(results: Sequence[tuple[RunResult, Summary]], path: Path) -> Plot:
    figure, axes = plt.subplots(3, 1, figsize=(WIDTH_IN, 3 * PANEL_HEIGHT_IN * 0.8), sharex=True)
    for result, _ in results:
        times_s = [snapshot.taken_s - result.started_s for snapshot in result.snapshots]
        axes[0].plot(times_s, [snapshot.running for snapshot in result.snapshots], label=_name(result))
        axes[1].plot(times_s, [snapshot.waiting for snapshot in result.snapshots], label=_name(result))
        axes[2].plot(
            times_s, [(snapshot.kv_usage or 0.0) * PERCENT for snapshot in result.snapshots], label=_name(result)
        )
    for axis, ylabel in zip(axes, ("running", "waiting", "KV cache used (%)"), strict=True):
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    axes[2].set_xlabel("seconds since the load point started")
    return _save(
        figure,
        path,
        "Engine /metrics while the load ran: waiting rising with KV low → raise "
        "--max-num-seqs; waiting rising with KV near 100% → raise the KV budget",
    )


def write_plots(out_dir: Path, results: Sequence[tuple[RunResult, Summary]]) -> list[Plot]:
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [latency_cdfs(results, out_dir / "latency_cdf.png")]
    if len({result.spec.load_value for result, _ in results}) > 1:
        plots.append(load_curves(results, out_dir / "load_curves.png"))
    with_metrics = [(result, summary) for result, summary in results if result.snapshots]
    if with_metrics:
        plots.append(metrics_series(with_metrics, out_dir / "metrics_timeseries.png"))
    return plots
