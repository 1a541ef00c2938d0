"""REPORTING, one self-contained HTML file: tables, definitions and every plot embedded as base64 PNG."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from labs.loadtest.aggregate import DEFINITIONS, Distribution, Peaks, Summary
from labs.loadtest.plots import Plot
from labs.loadtest.runner import RunResult
from labs.results import Envelope

REPORT_HTML = "report.html"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
figure { margin: 1.5rem 0; } img { max-width: 100%; } dt { font-weight: bold; } .note { color: #a60; }
"""
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")


def _cell(value: float | int | str) -> str:
    if isinstance(value, float):
        return "<td>—</td>" if value != value else f"<td>{value:,.1f}</td>"
    return f"<td>{html.escape(str(value))}</td>"


def _runs_table(results: Sequence[tuple[RunResult, Summary]]) -> str:
    headers = (
        "endpoint",
        "load",
        "requests",
        "ok",
        "truncated",
        "failed",
        "duration s",
        "req/s",
        "output tok/s",
        "output tokens",
        "/metrics",
    )
    rows = []
    for result, summary in results:
        peaks = Peaks.of(result.snapshots)
        metrics = f"{peaks.num_samples} samples: {peaks.describe()}" if peaks else result.metrics_note or "not read"
        rows.append(
            "<tr>"
            + "".join(
                _cell(value)
                for value in (
                    result.target.name,
                    result.spec.label,
                    summary.num_requests,
                    summary.num_ok,
                    summary.num_truncated,
                    summary.num_failed,
                    summary.duration_s,
                    summary.request_throughput_per_s,
                    summary.output_tokens_per_s,
                    summary.total_output_tokens,
                )
            )
            + f'<td class="text">{html.escape(metrics)}</td></tr>'
        )
    head = "".join(f"<th>{header}</th>" for header in headers)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _latency_table(results: Sequence[tuple[RunResult, Summary]]) -> str:
    stats = ("mean", "median", "p90", "p95", "p99")
    head = "<th>endpoint · load</th><th>metric</th>" + "".join(f"<th>{stat}</th>" for stat in stats)
    rows = []
    for result, summary in results:
        for name in LATENCIES:
            distribution: Distribution = getattr(summary, name)
            rows.append(
                f"<tr>{_cell(f'{result.target.name} · {result.spec.label}')}{_cell(name)}"
                + "".join(_cell(getattr(distribution, stat)) for stat in stats)
                + "</tr>"
            )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _figure(plot: Plot) -> str:
    data = base64.b64encode(plot.path.read_bytes()).decode()
    alt = html.escape(plot.caption)
    return f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"><figcaption>{alt}</figcaption></figure>'


def machine_line(envelope: Envelope) -> str:
    machine = envelope.machine
    return html.escape(f"{machine.describe()} · {machine.platform} · kit {envelope.kit_version}")


def html_page(title: str, envelope: Envelope, body: str) -> str:
    """A self-contained report page: the title, when and by which command the results were made, the machine."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<link rel="icon" href="data:,"><style>{STYLE}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(envelope.created_utc)} · <code>{html.escape(envelope.command)}</code></p>
<p>{machine_line(envelope)}</p>
{body}
</body></html>
"""


def write_html(
    out_dir: Path, results: Sequence[tuple[RunResult, Summary]], plots: Sequence[Plot], envelope: Envelope
) -> Path:
    definitions = "".join(
        f"<dt>{html.escape(name)}</dt><dd>{html.escape(text)}</dd>" for name, text in DEFINITIONS.items()
    )
    notes_by_endpoint = {result.target.name: result.metrics_note for result, _ in results if result.metrics_note}
    notes = "".join(
        f'<p class="note">{html.escape(name)}: {html.escape(note)}</p>' for name, note in notes_by_endpoint.items()
    )
    page = html_page(
        "Load test report",
        envelope,
        f"""<h2>Runs</h2>{_runs_table(results)}{notes}
<h2>Latencies (ms)</h2>{_latency_table(results)}
<h2>Plots</h2>{''.join(_figure(plot) for plot in plots)}
<h2>Definitions</h2><dl>{definitions}</dl>""",
    )
    path = out_dir / REPORT_HTML
    path.write_text(page)
    return path
