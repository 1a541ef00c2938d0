"""Reporting: curl-style request lines, the table, and the files (text, JSON with every raw number, PNG).

Separate writers over the same summaries; the JSON is rewritten after every phase so that a run that
dies half-way (an engine gone, Ctrl-C) keeps everything gathered until then.
"""

from __future__ import annotations

import io
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt
from rich.console import Console, JustifyMethod
from rich.table import Table

from client.stream import RequestRecord
from labs.compare.aggregate import CONCURRENT, PhaseSummary, scaling, summarize
from labs.compare.run import EngineFacts, PhaseRun
from labs.results import Envelope, MeasuredEngine, write

TEXT_FILE = "comparison-results.txt"
JSON_FILE = "comparison-results.json"
PLOT_FILE = "comparison-wall-time.png"
PLOT_DPI = 120
TEXT_WIDTH = 124
TABLE_WIDTH = 124  # the table's natural width; wider than the 80 columns rich assumes off a terminal


def request_line(engine: str, mode: str, record: RequestRecord) -> str:
    """One finished request, as the seed's curl lines showed it: status and total time (plus tokens)."""
    seconds = (record.done_s or record.sent_s) - record.sent_s
    status = f"HTTP {record.status}" if record.status is not None else "no answer"
    tokens = (
        f"{record.output_tokens} tok" if record.output_tokens is not None else f"{len(record.chunk_times_s)} chunks"
    )  # no usage in the stream: what arrived
    line = (
        f"{engine:<9} {mode:<19} #{record.request_id:<2} {status:<9} time_total {seconds:6.3f} s  "
        f"{tokens:>7}  finish={record.finish_reason}  {record.outcome.upper() if not record.ok else 'ok'}"
    )
    return line + (f"  ({record.error[:80]})" if record.error else "")


def table(summaries: list[PhaseSummary]) -> Table:
    factors = scaling(summaries)
    result = Table(title="Sequential vs concurrent, same model on every engine")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("engine", "left"),
        ("mode", "left"),
        ("requests", "right"),
        ("wall s", "right"),
        ("output tok/s", "right"),
        ("ok", "right"),
        ("truncated", "right"),
        ("empty/failed", "right"),
        ("scaling", "right"),
    )
    for column, justify in columns:
        result.add_column(column, justify=justify, no_wrap=column in ("engine", "mode", "scaling"))
    for summary in summaries:
        factor = factors.get(summary.engine) if summary.mode == CONCURRENT else None
        bad = "red" if summary.num_bad else ""
        shown = f"{factor:.2f}x" if factor is not None else ""
        if factor is not None and summary.num_bad:
            shown = f"[red]{shown} (cut short)[/red]"  # fast because answers were cut: not a real speed-up
        result.add_row(
            summary.engine,
            summary.mode,
            str(summary.num_requests),
            f"{summary.wall_s:.3f}",
            f"{summary.output_tokens_per_s:.1f}",
            str(summary.num_ok),
            f"[{bad}]{summary.num_truncated}[/]" if bad else "0",
            f"{summary.num_empty}/{summary.num_failed}",
            shown,
        )
    return result


class ResultsWriter:
    """Owns the results folder: JSON after each phase, text and plot at the end (or when stopped early)."""

    def __init__(self, folder: Path, config: dict[str, Any], command: str) -> None:
        self.folder = folder
        self.config = config
        self.envelope = Envelope.now(command)  # the engines join it as they are checked
        self.engines: list[EngineFacts] = []
        self.warmups: dict[str, dict[str, Any]] = {}
        self.runs: list[PhaseRun] = []
        self.notes: list[str] = []

    @property
    def summaries(self) -> list[PhaseSummary]:
        return [summarize(run) for run in self.runs]

    def add(self, run: PhaseRun) -> None:
        self.runs.append(run)
        self.write_json()

    def write_json(self) -> Path:
        engines = tuple(
            MeasuredEngine(facts.model, facts.api_url.removesuffix("/v1"), facts.engine, facts.version.get("version"))
            for facts in self.engines
        )
        return write(self.folder / JSON_FILE, replace(self.envelope, engines=engines), self.document())

    def document(self) -> dict[str, Any]:
        """What the results file holds under its envelope."""
        summaries = self.summaries
        return {
            "config": self.config,
            "machine": asdict(self.envelope.machine),  # also in the envelope; kept for readers of this key
            "engines": [asdict(facts) for facts in self.engines],
            "warmups": self.warmups,
            "phases": [
                {
                    "engine": run.engine,
                    "mode": run.mode,
                    "concurrent": run.concurrent,
                    "started_s": run.started_s,
                    "finished_s": run.finished_s,
                    "wall_s": run.wall_s,
                    "note": run.note,
                    "records": [record.to_dict() for record in run.records],
                }
                for run in self.runs
            ],
            "summaries": [summary.to_dict() for summary in summaries],
            "scaling": scaling(summaries),
            "notes": self.notes,
        }

    def write_text(self) -> Path:
        buffer = io.StringIO()
        console = Console(file=buffer, width=TEXT_WIDTH, no_color=True, highlight=False)
        console.print(f"Engine comparison  {self.config.get('started_at', '')}")
        console.print(f"machine: {self.envelope.machine.cpu_model}, {self.envelope.machine.usable_cores} cores usable")
        console.print(
            f"settings: N={self.config.get('n')}, max_tokens={self.config.get('max_tokens')}, "
            f"temperature={self.config.get('temperature')}"
        )
        for facts in self.engines:
            console.print(
                f"engine {facts.engine}: {facts.api_url} model {facts.model} "
                f"{self.config.get('engine_settings', {}).get(facts.engine, '')}"
            )
        console.print()
        for run in self.runs:
            for record in sorted(run.records, key=lambda item: item.request_id):
                console.print(request_line(run.engine, run.mode, record), markup=False)
        console.print()
        console.print(table(self.summaries))
        for note in self.notes:
            console.print(f"note: {note}", markup=False)
        path = self.folder / TEXT_FILE
        path.write_text(buffer.getvalue())
        return path

    def write_plot(self) -> Path | None:
        summaries = self.summaries
        if not summaries:
            return None
        modes = list(dict.fromkeys(summary.mode for summary in summaries))
        engines = list(dict.fromkeys(summary.engine for summary in summaries))
        by_key = {(summary.engine, summary.mode): summary for summary in summaries}
        factors = scaling(summaries)
        width = 0.8 / len(engines)
        figure, axes = plt.subplots(figsize=(8, 4.5))
        for index, engine in enumerate(engines):
            xs = [position + index * width for position in range(len(modes))]
            shown = [by_key.get((engine, mode)) for mode in modes]
            heights = [summary.wall_s if summary else 0.0 for summary in shown]
            concurrent = by_key.get((engine, CONCURRENT))
            cut = concurrent.num_bad if concurrent else 0
            label = engine + (
                f" (scaling {factors[engine]:.2f}x{', answers cut short' if cut else ''})" if engine in factors else ""
            )
            bars = axes.bar(xs, heights, width, label=label)
            axes.bar_label(
                bars,
                [
                    f"{summary.wall_s:.2f} s" + (f"\n{summary.num_bad} cut short/failed" if summary.num_bad else "")
                    if summary
                    else ""
                    for summary in shown
                ],
                fontsize=8,
            )
        axes.set_xticks([position + width * (len(engines) - 1) / 2 for position in range(len(modes))], modes)
        axes.set_ylabel("wall time (s)")
        axes.set_title(f"Wall time per mode (N={self.config.get('n')}, max_tokens={self.config.get('max_tokens')})")
        axes.legend()
        figure.tight_layout()
        path = self.folder / PLOT_FILE
        figure.savefig(path, dpi=PLOT_DPI)
        plt.close(figure)
        return path
