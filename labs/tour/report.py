"""REPORTING: the tour's one HTML page (every section's plot, tables and reading, the seed's figure beside) and
its JSON in the kit's results envelope, both written again after every section so a stopped tour keeps a report.

`report(folder)` draws a recorded tour again (`python -m labs.tour --report FOLDER`): nothing here needs an engine.
"""

from __future__ import annotations

import base64
import html
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from labs import results
from labs.loadtest.html_report import html_page
from labs.tour import plots
from labs.tour.catalogue import PARTS
from labs.tour.outline import Section
from labs.tour.readings import Reading, Table

TOUR_JSON = "tour.json"
REPORT_HTML = "index.html"
TITLE = "The vLLM lab kit's tour"
SECTION_STYLE = """
section { border-top: 2px solid #ddd; margin-top: 2rem; }
.headline { font-size: 1.15rem; } .headline b { color: #06c; } .seed { color: #666; }
.failed { color: #c22; font-weight: bold; } .lab { color: #666; font-size: 0.85rem; }
"""


class Status(StrEnum):
    OK = "ok"
    FAILED = "failed"
    NOT_RUN = "not run"  # the tour was stopped before it


@dataclass(slots=True)
class SectionResult:
    """One section as measured: its data (what the labs' results files said), or why it failed."""

    section: Section
    status: Status
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "section": self.section.value, "status": self.status.value}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SectionResult:
        return cls(Section(raw["section"]), Status(raw["status"]), raw["seconds"], raw["data"], raw["error"])


@dataclass(slots=True)
class Tour:
    """A whole tour: how it was run, the machine as lscpu shows it, and every section in the course's order."""

    quick: bool
    lscpu: dict[str, str]
    sections: list[SectionResult]
    notes: list[str] = field(default_factory=list)  # what the tour did around the sections (engines started)
    seconds: float = 0.0

    def payload(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "lscpu": self.lscpu,
            "seconds": self.seconds,
            "notes": self.notes,
            "sections": [section.to_dict() for section in self.sections],
        }

    def result(self, section: Section) -> SectionResult:
        return next(item for item in self.sections if item.section is section)

    @classmethod
    def from_payload(cls, raw: dict[str, Any]) -> Tour:
        sections = [SectionResult.from_dict(item) for item in raw["sections"]]
        return cls(raw["quick"], raw["lscpu"], sections, raw["notes"], raw["seconds"])


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(header)}</th>" for header in table.headers)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in table.rows)
    caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f"<table>{caption}<tr>{head}</tr>{rows}</table>"


def _figure(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    alt = html.escape(caption)
    return f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"><figcaption>{alt}</figcaption></figure>'


def _headline(reading: Reading) -> str:
    line = f'<p class="headline">This machine: <b>{html.escape(reading.headline)}</b>'
    if reading.seed is not None:
        line += (
            f' <span class="seed">· {html.escape(reading.seed.source)}: <b>{html.escape(reading.seed.figure)}</b> '
            f"({html.escape(reading.seed.what)})</span>"
        )
    return line + "</p>"


def section_html(result: SectionResult, folder: Path, isa_flags: tuple[str, ...]) -> str:
    section, part = result.section, PARTS[result.section]
    parts = [
        f'<section id="{section.value}"><h2>{html.escape(part.title)}</h2>',
        f'<p class="lab">{html.escape(part.lab)} · {html.escape(part.page)} · {result.seconds:.0f} s</p>',
    ]
    if result.status is not Status.OK:
        why = result.error or "the tour was stopped before this section"
        parts.append(f'<p class="failed">{html.escape(result.status.value)}: {html.escape(why)}</p></section>')
        return "".join(parts)
    try:
        reading = part.reading(result.data, isa_flags)
        plot = plots.save(part.draw, result.data, folder / f"{section.value}.png", part.plot_height)
    except Exception as exc:  # one section's odd data must not cost the others their report
        why = f"its data could not be read ({exc.__class__.__name__}: {exc})"
        parts.append(f'<p class="failed">report failed: {html.escape(why)}</p></section>')
        return "".join(parts)
    parts += [
        _headline(reading),
        "<ul>" + "".join(f"<li>{html.escape(sentence)}</li>" for sentence in reading.sentences) + "</ul>",
        _figure(plot, part.title.split(": ", 1)[-1]),
        *(_table(table) for table in reading.tables),
        "</section>",
    ]
    return "".join(parts)


def machine_html(lscpu: dict[str, str]) -> str:
    shown = ("Model name", "CPU(s)", "Core(s) per socket", "Thread(s) per core", "Socket(s)", "ISA")
    cells = "".join(
        f"<tr><td>{html.escape(key)}</td><td>{html.escape(lscpu[key])}</td></tr>" for key in shown if key in lscpu
    )
    return f"<table><caption>lscpu</caption>{cells}</table>" if cells else ""


def write(folder: Path, envelope: results.Envelope, tour: Tour) -> Path:
    """tour.json (the envelope and every section's data) and index.html beside it; returns the page's path."""
    folder.mkdir(parents=True, exist_ok=True)
    results.write(folder / TOUR_JSON, envelope, tour.payload())
    summary = "".join(
        f"<tr><td><a href='#{item.section.value}'>{html.escape(PARTS[item.section].title)}</a></td>"
        f"<td>{html.escape(item.status.value)}</td><td>{item.seconds:.0f} s</td></tr>"
        for item in tour.sections
    )
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in tour.notes)
    body = (
        f"<style>{SECTION_STYLE}</style>{machine_html(tour.lscpu)}"
        f"<p>{'Quick tour (--quick: fewer requests, the same sections)' if tour.quick else 'Full tour'}, "
        f"{tour.seconds:.0f} s in all.</p><table><tr><th>section</th><th>status</th><th>took</th></tr>{summary}</table>"
        + (f"<ul>{notes}</ul>" if notes else "")
        + "".join(section_html(item, folder, envelope.machine.isa_flags) for item in tour.sections)
    )
    page = folder / REPORT_HTML
    page.write_text(html_page(TITLE, envelope, body))
    return page


def report(folder: Path) -> Path:
    """Draw a recorded tour again from its tour.json (ResultsError, one line, for any other file)."""
    envelope, payload = results.load(folder / TOUR_JSON)
    try:
        tour = Tour.from_payload(payload)
    except (KeyError, TypeError, ValueError) as exc:
        raise results.ResultsError(f"{folder / TOUR_JSON} is not a tour's results ({exc})") from None
    return write(folder, envelope, tour)
