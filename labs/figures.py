"""A measured figure lives once, in the results file that measured it: the pages link to it, never retype it.

In a page a figure is a Markdown link: its text is what the reader sees, its target the results file and a
pointer to the value in it (RFC 6901, plus `key=value` to pick the element of a list that has it):

    on AVX2 the uni executor decoded [1.44x](measured/uni-executor-avx2-stand-in-2026-12-03.json#/ratios/1)
    the kit over the worker process at one user

`check` holds every such figure to its file: the text must be the value, rounded to the digits shown, in one
of the units of UNITS (`%` shows a fraction x 100; MB, GB and GiB show a key that ends in `_bytes` in that unit;
every other unit shows the value as the file holds it, so the file's key carries the unit: `seconds_to_healthy`,
`ttft_ms`, `output_tokens_per_s`). The files are
curated results (labs/measured/, each with its envelope: the machine, the kit's version, the date, the
command); labs/measured/README.md lists them, generated from their envelopes.

    .venv/bin/python -m labs.figures                      # check every page's figures against their files
    .venv/bin/python -m labs.figures --write              # rewrite labs/measured/README.md
    .venv/bin/python -m labs.figures keep RESULTS NAME --about "what it measured"
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.results import ResultsError, load, write
from ui.cli import KitArgumentParser
from ui.progress import console, fail

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "labs" / "measured"
INDEX = MEASURED / "README.md"
ABOUT = "about"  # a curated file's one line: what it measured
RECORDED = "recorded"  # how a file came to be where no command wrote it (transcribed from a run's printed tables)
# [text](file.json#/pointer), or [text](file.json#/pointer "quantity"): a quantity's name (labs/quantities.py)
FIGURE = re.compile(r'\[([^\]\n]+)\]\(([^)\s#]+\.json)#(/[^)\s]*)(?: "([^"\n]+)")?\)')
UNITS = ("x", "%", "ms", "s", "tok/s", "GB/s", "MB", "GB", "GiB", "req/s", "tokens")
BYTES_IN = {"MB": 1e6, "GB": 1e9, "GiB": 2**30}  # what a `_bytes` key shows in each unit
SHOWN = re.compile(
    r"(?P<sign>[+−-])?(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<decimals>\d+))?(?: ?(?P<unit>"
    + "|".join(re.escape(unit) for unit in UNITS)
    + r"))?"
)


class FigureError(ValueError):
    """A pointer that leads nowhere in its file; the message says where it stopped."""


def pages(root: Path = ROOT) -> list[Path]:
    """Every page a reader is sent to: the README, each folder's README, the lab pages, .env.example's comments."""
    found = [root / "README.md", *root.glob("*/README.md"), *root.glob("*/*/README.md"), *root.glob("labs/*.md")]
    found.append(root / ".env.example")
    return sorted({page for page in found if page.is_file()})


def resolve(document: Any, pointer: str) -> Any:
    """The value at `pointer` (`/a/b/0`, or `/arms/name=kit/points/concurrency=16/...` in lists of objects)."""
    value = document
    for raw in pointer.removeprefix("/").split("/") if pointer not in ("", "/") else []:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        elif isinstance(value, list) and "=" in token:
            key, wanted = token.split("=", 1)
            matches = [item for item in value if isinstance(item, dict) and str(item.get(key)) == wanted]
            if len(matches) != 1:
                raise FigureError(f"{len(matches)} elements have {key}={wanted} at {token!r} in {pointer}")
            value = matches[0]
        else:
            raise FigureError(f"nothing at {token!r} in {pointer}")
    return value


def mismatch(text: str, value: Any, pointer: str = "") -> str | None:
    """Why `text` does not show `value` (None when it does): same digits after rounding, a known unit; a value at a
    `_bytes` key (the pointer's last token) shows in MB, GB or GiB."""
    shown = SHOWN.fullmatch(text.strip())
    if shown is None:
        return f"{text!r} is not a figure: a number, then one of {', '.join(UNITS)} (or none)"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"the file holds {value!r} there, not a number"
    in_bytes = pointer.rsplit("/", 1)[-1].endswith("_bytes") and shown["unit"] in BYTES_IN
    scaled = value
    if shown["unit"] == "%":
        scaled = value * 100
    elif in_bytes:
        scaled = value / BYTES_IN[shown["unit"]]
    decimals = len(shown["decimals"] or "")
    written = f"{abs(scaled):,.{decimals}f}" if "," in shown["whole"] else f"{abs(scaled):.{decimals}f}"
    number = shown["whole"] + (f".{shown['decimals']}" if decimals else "")
    negative = shown["sign"] in ("−", "-")
    if written != number or negative != (scaled < 0):
        unit = "x 100 " if shown["unit"] == "%" else (f"in {shown['unit']} " if in_bytes else "")
        return f"the page shows {text!r}, the file {value!r} ({unit}rounded to {decimals} decimals: {written})"
    return None


@dataclass(frozen=True, slots=True)
class Figure:
    page: Path
    line: int
    text: str
    target: str
    pointer: str
    quantity: str | None = None  # the name in the link's title: a quantity of labs/quantities.py

    @property
    def file(self) -> Path:
        return (self.page.parent / self.target).resolve()

    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        title = f' "{self.quantity}"' if self.quantity else ""
        return f"{page}:{self.line}: [{self.text}]({self.target}#{self.pointer}{title})"


def figures_in(page: Path) -> list[Figure]:
    return [
        Figure(page, number, *match.groups())
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for match in FIGURE.finditer(line)
    ]


def problems(figures: list[Figure], measured: Path = MEASURED) -> list[str]:
    """One line per figure that is not its file's value, or cites a file that is not a curated results file."""
    found: list[str] = []
    documents: dict[Path, dict[str, Any] | str] = {}
    for figure in figures:
        if figure.file.parent != measured.resolve():
            found.append(f"{figure.where()}: cite a curated results file in labs/measured/, not {figure.target}")
            continue
        if figure.file not in documents:
            try:
                documents[figure.file] = load(figure.file)[1]
            except ResultsError as exc:
                documents[figure.file] = str(exc)
        document = documents[figure.file]
        if isinstance(document, str):
            found.append(f"{figure.where()}: {document}")
            continue
        try:
            why = mismatch(figure.text, resolve(document, figure.pointer), figure.pointer)
        except FigureError as exc:
            why = str(exc)
        if why:
            found.append(f"{figure.where()}: {why}")
    return found


def index(folder: Path = MEASURED) -> str:
    """labs/measured/README.md: each curated file with what it measured, where, when, and the command."""
    lines = [
        "# Measured: the results the pages cite",
        "",
        "Every figure a page quotes is a link to one of these files and a pointer into it, and",
        "`tests/labs/test_figures.py` holds each figure to its file. Each file carries the envelope of",
        "`labs/results.py`: the machine, the kit's version, the date and the command that wrote it; run the",
        "command to measure your own machine. This page is generated from the files:",
        "`.venv/bin/python -m labs.figures --write`.",
    ]
    for path in sorted(folder.glob("*.json")):
        envelope, payload = load(path)
        machine = envelope.machine.describe()
        stand_in = payload.get("machine") if isinstance(payload.get("machine"), dict) else {}
        if stand_in and stand_in.get("isa_stand_in"):
            machine += f"; run as {stand_in.get('isa')} (the kit's stand-in: `--cpu-isa`)"
        lines += ["", f"## [`{path.name}`]({path.name})", "", payload.get(ABOUT, "(no `about` line)"), ""]
        lines += [
            f"- machine: {machine}",
            f"- measured: {envelope.created_utc[:16].replace('T', ' ')} UTC, kit {envelope.kit_version}",
            f"- command: `{envelope.command}`",
        ]
        if payload.get(RECORDED):
            lines.append(f"- recorded: {payload[RECORDED]}")
    return "\n".join(lines) + "\n"


def keep(source: Path, name: str, about: str) -> Path:
    """Copy a results file a lab or benchmark wrote into labs/measured/ with its `about` line; its envelope stays."""
    envelope, payload = load(source)
    target = MEASURED / (name if name.endswith(".json") else f"{name}.json")
    return write(target, envelope, {ABOUT: about, **{key: value for key, value in payload.items() if key != ABOUT}})


def build_parser() -> KitArgumentParser:
    parser = KitArgumentParser(prog="python -m labs.figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {INDEX.relative_to(ROOT)}")
    commands = parser.add_subparsers(dest="command")
    kept = commands.add_parser("keep", help="copy a results file into labs/measured/ for the pages to cite")
    kept.add_argument("source", type=Path, help="a results file a lab or benchmark wrote (results/...json)")
    kept.add_argument("name", help="its name in labs/measured/: what, ISA, date (kit-vs-defaults-avx2-2026-12-03)")
    kept.add_argument("--about", required=True, help="one line: what it measured, and on which kind of CPU")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "keep":
            console.print(f"kept {keep(args.source, args.name, args.about).relative_to(ROOT)}")
            args.write = True
        if args.write:
            INDEX.write_text(index())
            console.print(f"wrote {INDEX.relative_to(ROOT)}")
            return 0
    except ResultsError as exc:
        fail(str(exc), code=2)
    figures = [figure for page in pages() for figure in figures_in(page)]
    found = problems(figures)
    for line in found:
        console.print(line, markup=False, highlight=False)
    if found:
        return 1
    console.print(f"{len(figures)} figures on {len({figure.page for figure in figures})} pages hold to their files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
