"""The watch's timeline as a PNG: running and waiting requests, and KV usage, against seconds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and in CI
import matplotlib.pyplot as plt

from serve.processes.metrics import MetricsSnapshot

FIGURE_SIZE_IN = (8.0, 4.5)
DPI = 120
PERCENT = 100.0


def write_timeline(snapshots: Sequence[MetricsSnapshot], path: Path, title: str) -> Path:
    """Requests on the left axis, KV usage (%) on the right; one point per sample."""
    if not snapshots:
        raise ValueError("no samples to plot; watch for at least one interval")
    start_s = snapshots[0].taken_s
    seconds = [snap.taken_s - start_s for snap in snapshots]
    figure, requests_axis = plt.subplots(figsize=FIGURE_SIZE_IN, dpi=DPI)
    requests_axis.plot(seconds, [snap.running for snap in snapshots], marker=".", label="running")
    requests_axis.plot(seconds, [snap.waiting for snap in snapshots], marker=".", label="waiting")
    requests_axis.set_xlabel("seconds since the first sample")
    requests_axis.set_ylabel("requests")
    requests_axis.set_ylim(bottom=0)
    kv_axis = requests_axis.twinx()
    kv_axis.plot(
        seconds,
        [PERCENT * (snap.kv_usage or 0.0) for snap in snapshots],
        color="tab:red",
        linestyle="--",
        label="KV usage (%)",
    )
    kv_axis.set_ylabel("KV usage (%)")
    kv_axis.set_ylim(0, PERCENT)
    lines = requests_axis.get_lines() + kv_axis.get_lines()
    requests_axis.legend(lines, [str(line.get_label()) for line in lines], loc="upper left")
    requests_axis.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
