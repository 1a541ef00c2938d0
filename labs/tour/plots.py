"""REPORTING, one PNG per section, drawn from the section's recorded data (the same data its reading reads)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from labs.tour.readings.course import waste
from labs.tour.readings.serving import users_text

DPI = 100
WIDE_IN = (10.0, 3.6)
PERCENT = 100.0
POLICIES = ("static", "continuous")
VERDICT_SCORES = {"fail": 0, "n/a": 1, "differs": 2, "pass": 3}  # rows of VERDICT_COLOURS, in this order
VERDICT_COLOURS = ListedColormap(["#f4a6a6", "#dddddd", "#ffd27f", "#a8e0b0"])
VERDICT_MARKS = {"pass": "✔", "fail": "✘"}


def _bars(axes: Axes, groups: list[str], series: dict[str, list[float]], fmt: str = "{:.1f}") -> None:
    """Grouped bars: one group per x label, one bar per series, each bar labelled with its value."""
    width = 0.8 / max(len(series), 1)
    for index, (label, values) in enumerate(series.items()):
        xs = [position + index * width for position in range(len(groups))]
        bars = axes.bar(xs, values, width, label=label)
        axes.bar_label(bars, [fmt.format(value) for value in values], fontsize=7)
    axes.set_xticks([position + width * (len(series) - 1) / 2 for position in range(len(groups))], groups)
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3, axis="y")


def seed(data: dict[str, Any], figure: Figure) -> None:
    axes = figure.subplots()
    rows = data["summaries"]
    modes = list(dict.fromkeys(row["mode"] for row in rows))
    engines = list(dict.fromkeys(row["engine"] for row in rows))
    walls = {(row["engine"], row["mode"]): row["wall_s"] for row in rows}
    series = {
        f"{engine} ({data['scaling'][engine]:.2f}x)" if engine in data["scaling"] else engine: [
            walls.get((engine, mode), 0.0) for mode in modes
        ]
        for engine in engines
    }
    _bars(axes, modes, series, "{:.2f} s")
    axes.set(ylabel="wall time (s)", title=f"{data['n']} requests, max_tokens {data['max_tokens']}: lower is faster")


def paging(data: dict[str, Any], figure: Figure) -> None:
    axes = figure.subplots()
    study = data.get("study")
    if study:
        rows = sorted(study["results"], key=lambda row: (row["max_batch_size"], row["policy"]))
        groups = [f"{row['max_batch_size']} {row['policy'][:4]}\nwaste {waste(row):.1%}" for row in rows]
        series = {
            "live tokens": [row["kv_live_tokens"] for row in rows],
            "paged slots": [row["kv_paged_slots"] for row in rows],
            "max_len reservation": [row["kv_max_len_slots"] for row in rows],
        }
        _bars(axes, groups, series, "{:,.0f}")
        axes.set(ylabel="KV token slots at the peak", title="Teaching engine: what paging reserves vs a max_len slab")
        return
    config = data["vllm"]["cache_config"]  # no study: vLLM's pool as predicted and reported
    predicted = [row for row in data["vllm"]["rows"] if row["quantity"] == "blocks"]
    values = [float(predicted[0]["predicted"]), float(config.get("num_gpu_blocks", 0))] if predicted else [0.0, 0.0]
    axes.bar(["predicted blocks", "vLLM's blocks"], values)
    axes.set(title="vLLM's KV pool: the sizing lab's prediction and the engine's own count")


def batching(data: dict[str, Any], figure: Figure) -> None:
    ttft_axes, tok_axes = figure.subplots(1, 2)
    batches = sorted({row["max_batch_size"] for row in data["results"]})
    by_key = {(row["policy"], row["max_batch_size"]): row for row in data["results"]}
    for axes, key, title in (
        (ttft_axes, "ttft_p50_ms", "TTFT p50 (ms): lower is better"),
        (tok_axes, "output_tokens_per_s", "output tok/s: higher is better"),
    ):
        series = {
            policy: [by_key[(policy, batch)][key] if (policy, batch) in by_key else 0.0 for batch in batches]
            for policy in POLICIES
        }
        _bars(axes, [f"max batch {batch}" for batch in batches], series, "{:,.0f}")
        axes.set(title=title)


def load(data: dict[str, Any], figure: Figure) -> None:
    latency_axes, series_axes = figure.subplots(1, 2)
    points = sorted(data["points"], key=lambda point: point["rate"])
    rates = [point["rate"] for point in points]
    for metric, which, style in (("ttft_ms", "median", "o-"), ("ttft_ms", "p99", "x--"), ("tpot_ms", "median", "s-")):
        values = [point["summary"][metric][which] for point in points]
        latency_axes.plot(
            rates, [value if value is not None else float("nan") for value in values], style, label=f"{metric} {which}"
        )
    latency_axes.set(xlabel="offered rate (req/s)", ylabel="ms", title="Latency against load", yscale="log")
    latency_axes.legend(fontsize=8)
    latency_axes.grid(alpha=0.3)
    busiest = points[-1]
    times_s = [point["t_s"] for point in busiest["series"]]
    series_axes.plot(times_s, [point["running"] for point in busiest["series"]], "o-", label="running")
    series_axes.plot(times_s, [point["waiting"] for point in busiest["series"]], "s-", label="waiting")
    kv_axes = series_axes.twinx()
    kv_axes.plot(
        times_s, [(point["kv_usage"] or 0.0) * PERCENT for point in busiest["series"]], "g.:", label="KV used (%)"
    )
    kv_axes.set_ylabel("KV used (%)")
    series_axes.set(xlabel="s since the load point started", title=f"/metrics at {busiest['rate']:g} req/s")
    series_axes.legend(fontsize=8, loc="upper left")
    kv_axes.legend(fontsize=8, loc="upper right")


def quantization(data: dict[str, Any], figure: Figure) -> None:
    tok_axes, bytes_axes = figure.subplots(1, 2)
    engines = data["engines"]
    users = sorted(engines[0]["tok_s"], key=float)
    _bars(
        tok_axes,
        [users_text(user) for user in users],
        {e["label"]: [e["tok_s"].get(user) or 0.0 for user in users] for e in engines},
    )
    tok_axes.set(title="output tok/s")
    labels = [f"{engine['label']}\nperplexity {engine['perplexity']['value']:.3f}" for engine in engines]
    bars = bytes_axes.bar(
        labels, [engine["mb_per_step"] or 0.0 for engine in engines], color=["tab:blue", "tab:orange"]
    )
    bytes_axes.bar_label(bars, [f"{engine['mb_per_step'] or 0:.0f} MB" for engine in engines], fontsize=8)
    bytes_axes.set(title="weights read per decode step (MB)")


def contract(data: dict[str, Any], figure: Figure) -> None:
    axes = figure.subplots()
    engines = [engine["name"] for engine in data["engines"]]
    checks = list(data["matrix"])
    grid = [[VERDICT_SCORES.get(data["matrix"][check].get(name, "n/a"), 1) for check in checks] for name in engines]
    axes.imshow(grid, cmap=VERDICT_COLOURS, vmin=-0.5, vmax=3.5, aspect="auto")
    axes.set_yticks(range(len(engines)), engines)
    axes.set_xticks(range(len(checks)), checks, rotation=70, fontsize=7, ha="right")
    for row, name in enumerate(engines):
        for column, check in enumerate(checks):
            verdict = data["matrix"][check].get(name, "—")
            axes.text(column, row, VERDICT_MARKS.get(verdict, verdict), ha="center", va="center", fontsize=9)
    axes.set(title="green ✔: as the contract says · orange: differs · red ✘: failed · grey: n/a")


def save(draw: Callable[[dict[str, Any], Figure], None], data: dict[str, Any], path: Path, height: float = 1.0) -> Path:
    """Draw one section's plot with its `draw` (labs/tour/catalogue.py names it) into `path`."""
    figure = plt.figure(figsize=(WIDE_IN[0], WIDE_IN[1] * height))
    try:
        draw(data, figure)
        figure.tight_layout()
        figure.savefig(path, dpi=DPI)
    finally:
        plt.close(figure)
    return path
