"""REPORTING: the matrix (check x engine) on the console, every difference with its evidence, the results file
in the kit's envelope (labs/results.py) and one self-contained HTML page in the load tester's style."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from client.endpoint import Endpoint
from labs.contract.probe import CheckRecord, Verdict
from labs.loadtest.html_report import html_page
from labs.results import Envelope, write

RESULTS_JSON = "contract.json"
REPORT_HTML = "report.html"
VERDICT_COLOURS = {Verdict.PASS: "#2a7", Verdict.DIFFERS: "#c80", Verdict.FAIL: "#c22", Verdict.NOT_APPLICABLE: "#888"}


def matrix(records: Sequence[CheckRecord]) -> dict[str, dict[str, Verdict]]:
    """check -> engine -> verdict, in the order the checks ran."""
    table: dict[str, dict[str, Verdict]] = {}
    for record in records:
        table.setdefault(record.check, {})[record.engine] = record.verdict
    return table


def matrix_lines(records: Sequence[CheckRecord], engines: Sequence[str]) -> list[str]:
    """The console matrix, one line per check: ✔ pass, ✘ fail, `differs`, `n/a`."""
    table = matrix(records)
    check_width = max([len("check"), *map(len, table)])
    widths = [max(len(engine), len("differs")) for engine in engines]
    header = [f"{engine:<{width}}" for engine, width in zip(engines, widths, strict=True)]
    lines = ["  ".join([f"{'check':<{check_width}}", *header]).rstrip()]
    for check, by_engine in table.items():
        cells = [
            f"{by_engine[engine].mark if engine in by_engine else '-':<{width}}"
            for engine, width in zip(engines, widths, strict=True)
        ]
        lines.append("  ".join([f"{check:<{check_width}}", *cells]).rstrip())
    return lines


def difference_lines(records: Sequence[CheckRecord]) -> list[str]:
    """Every check that did not pass, with its evidence: what a client that swaps engines runs into."""
    return [
        f"{record.engine}  {record.check}: {record.verdict.value}: {record.evidence}"
        for record in records
        if record.verdict is not Verdict.PASS
    ]


def counts(records: Sequence[CheckRecord], engine: str) -> dict[str, int]:
    found = {verdict.value: 0 for verdict in Verdict}
    for record in records:
        if record.engine == engine:
            found[record.verdict.value] += 1
    return found


def write_results(
    folder: Path, envelope: Envelope, endpoints: Sequence[Endpoint], records: Sequence[CheckRecord]
) -> Path:
    return write(folder / RESULTS_JSON, envelope, payload(endpoints, records))


def payload(endpoints: Sequence[Endpoint], records: Sequence[CheckRecord]) -> dict[str, Any]:
    """What contract.json holds under its envelope: each engine's counts, the matrix, every record."""
    return {
        "engines": [
            {
                "name": endpoint.name,
                "base_url": endpoint.base_url,
                "model": endpoint.model,
                "counts": counts(records, endpoint.name),
            }
            for endpoint in endpoints
        ],
        "matrix": {
            check: {engine: verdict.value for engine, verdict in row.items()} for check, row in matrix(records).items()
        },
        "records": [record.to_dict() for record in records],
    }


def _cell(verdict: Verdict | None) -> str:
    if verdict is None:
        return "<td>—</td>"
    return f'<td style="color:{VERDICT_COLOURS[verdict]};text-align:center">{html.escape(verdict.mark)}</td>'


def write_html(folder: Path, envelope: Envelope, endpoints: Sequence[Endpoint], records: Sequence[CheckRecord]) -> Path:
    names = [endpoint.name for endpoint in endpoints]
    head = "<th>check</th>" + "".join(f"<th>{html.escape(name)}</th>" for name in names)
    rows = "".join(
        f"<tr><td>{html.escape(check)}</td>{''.join(_cell(row.get(name)) for name in names)}</tr>"
        for check, row in matrix(records).items()
    )
    engines = "".join(
        f"<tr><td>{html.escape(endpoint.name)}</td><td class='text'>{html.escape(endpoint.base_url)}"
        f"</td><td class='text'>{html.escape(endpoint.model)}</td></tr>"
        for endpoint in endpoints
    )
    evidence = "".join(
        f"<tr><td>{html.escape(record.check)}</td><td class='text'>{html.escape(record.engine)}</td>"
        f"{_cell(record.verdict)}<td class='text'>{html.escape(record.evidence)}</td></tr>"
        for record in records
    )
    page = html_page(
        "OpenAI contract report",
        envelope,
        f"""<h2>Engines</h2><table><tr><th>name</th><th>/v1 URL</th><th>model</th></tr>{engines}</table>
<h2>Matrix</h2><p>✔ answered as the contract says · differs: answered, but not as the contract says ·
✘ no usable answer (5xx, traceback, no connection) · n/a: the check needs what this run lacks</p>
<table><tr>{head}</tr>{rows}</table>
<h2>Evidence</h2><table><tr><th>check</th><th>engine</th><th>verdict</th><th>what came back</th></tr>
{evidence}</table>""",
    )
    path = folder / REPORT_HTML
    path.write_text(page)
    return path
