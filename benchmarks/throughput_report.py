"""Reporting for benchmarks/kit_vs_defaults.py: ratios between arms, the console tables, the plot.

Pure functions of the report dict that the benchmark also writes as JSON, so a saved results.json can be
re-plotted or re-read without running anything: `.venv/bin/python -m benchmarks.throughput_report results.json`
(it reads the file through labs/results.py's `load`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server

import matplotlib.pyplot as plt
from rich.table import Table

from labs.results import ResultsError, load
from ui.cli import KitArgumentParser
from ui.progress import console, fail

GB = 1e9
PLOT_SIZE_IN = (11.0, 4.2)
PLOT_DPI = 120


def comparisons(baseline: str, ratios: dict[str, dict[int, float | None]]) -> dict[str, Any]:
    """From the baseline/other output tok/s ratios of each pairing: where the other arm still wins."""
    other_wins = {
        other: [c for c, ratio in by_c.items() if ratio is not None and ratio < 1] for other, by_c in ratios.items()
    }
    overtakes = {
        other: next((c for c, ratio in by_c.items() if ratio is not None and ratio > 1), None)
        for other, by_c in ratios.items()
    }
    return {
        "baseline": baseline,
        "output_tokens_per_s_ratio": ratios,
        "concurrency_where_other_wins": other_wins,
        "first_concurrency_baseline_wins": overtakes,
    }


def print_report(report: dict[str, Any]) -> None:
    machine = report["machine"]
    bandwidth = machine["bandwidth"]["copy_bytes_per_s"]
    isa = machine.get("isa", "ISA unknown") + (" (stand-in)" if machine.get("isa_stand_in") else "")
    table = Table(
        title=f"Output tok/s, TTFT and the decode ceiling ({isa}, {machine['usable_cores']} cores, "
        f"bandwidth {bandwidth / GB:.1f} GB/s)"
    )
    for column in ("arm", "users", "ok", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "ceiling tok/s", "of ceiling"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for arm in report["arms"]:
        for point in arm["points"]:
            summary, limit = point["summary"], point["ceiling"]
            table.add_row(
                arm["name"],
                str(point["concurrency"]),
                f"{summary['num_ok']}/{summary['num_requests']}",
                f"{summary['output_tokens_per_s']:.1f}",
                f"{summary['ttft_ms']['median']:.0f}",
                f"{summary['ttft_ms']['p99']:.0f}",
                f"{limit['ceiling_output_tokens_per_s']:.0f}",
                f"{limit['fraction_of_ceiling']:.0%}",
            )
    console.print(table)
    starts = Table(title="Start to healthy")
    for column in ("arm", "start", "seconds", "compile cache"):
        starts.add_column(column)
    for arm in report["arms"]:
        for number, start in enumerate(arm["starts"]):
            starts.add_row(
                arm["name"],
                "first" if number == 0 else f"warm restart {number}",
                f"{start['seconds_to_healthy']:.1f}",
                start["compile_cache"],
            )
    if starts.row_count:
        console.print(starts)
    compared = report["comparisons"]
    for other, ratios in compared.get("output_tokens_per_s_ratio", {}).items():
        cells = ", ".join(
            f"{c} users {ratio:.2f}x" if ratio is not None else f"{c} users -" for c, ratio in ratios.items()
        )
        console.print(f"{compared['baseline']} / {other} output tok/s: {cells}")
        wins = compared["concurrency_where_other_wins"][other]
        if wins:
            overtake = compared["first_concurrency_baseline_wins"][other]
            where = f"; {compared['baseline']} overtakes it at {overtake} users" if overtake else ""
            console.print(f"  {other} still wins at {', '.join(map(str, wins))} users{where}")


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Output tok/s (with each arm's bandwidth ceiling, dashed) and TTFT p50 against concurrency."""
    figure, (throughput, ttft) = plt.subplots(1, 2, figsize=PLOT_SIZE_IN)
    for arm in report["arms"]:
        users = [point["concurrency"] for point in arm["points"]]
        (line,) = throughput.plot(
            users, [point["summary"]["output_tokens_per_s"] for point in arm["points"]], marker="o", label=arm["name"]
        )
        throughput.plot(
            users,
            [point["ceiling"]["ceiling_output_tokens_per_s"] for point in arm["points"]],
            linestyle="--",
            color=line.get_color(),
            alpha=0.4,
        )
        ttft.plot(
            users,
            [point["summary"]["ttft_ms"]["median"] for point in arm["points"]],
            marker="o",
            color=line.get_color(),
            label=arm["name"],
        )
    throughput.set(
        xlabel="concurrent users",
        ylabel="output tok/s",
        yscale="log",
        title="Throughput (dashed: memory-bandwidth ceiling)",
    )
    ttft.set(xlabel="concurrent users", ylabel="TTFT p50 (ms)", yscale="log", title="Time to first token")
    for axes in (throughput, ttft):
        axes.grid(True, alpha=0.3)
        axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=PLOT_DPI)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(
        prog="python -m benchmarks.throughput_report",
        description="Print and plot a saved benchmarks.kit_vs_defaults results.json again.",
    )
    parser.add_argument("results", type=Path, help="the results.json benchmarks.kit_vs_defaults wrote")
    args = parser.parse_args(argv)
    try:
        _, report = load(args.results)
    except ResultsError as exc:
        fail(str(exc), code=2)
    print_report(report)
    write_plot(report, args.results.with_suffix(".png"))
    console.print(f"Wrote {args.results.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
