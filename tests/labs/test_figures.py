"""labs/figures.py: a figure a page quotes is a link to its results file, and it must be the value there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labs import figures
from labs.figures import FIGURE, Figure, FigureError, figures_in, mismatch, problems, resolve
from labs.quantities import Isa
from labs.results import Envelope, MachineFacts, load, write
from tests.conftest import ROOT
from tests.labs.unlinked import QUANTITY, UNLINKED, Kind, Unlinked, prose, quoted

PAGE_MAX_LINES = {"README.md": 150, "labs/throughput.md": 200}
# Where a newcomer reads how long things take, per kind of CPU: every cell a measured figure (a link to its
# results file), or says plainly that it was not measured
TIMES = {"README.md": "## How long it takes", "serve/install/README.md": "## How long each step takes"}
NOT_MEASURED = "not measured yet"
ISAS = {"README.md": tuple(isa.value for isa in Isa), "serve/install/README.md": ("AVX-512 + BF16", "AVX2 only")}

DOCUMENT = {
    "arms": [
        {"name": "kit", "points": [{"concurrency": 1, "tok_s": 25.46}, {"concurrency": 16, "tok_s": 216.4}]},
        {"name": "llamaserver-n", "points": [{"concurrency": 1, "tok_s": 83.6}]},
    ],
    "ratios": {"a/b": {"16": 3.4512}},
    "fraction": 0.0089,
    "tokens": 46592,
}


def test_every_figure_on_a_page_is_the_value_in_its_results_file() -> None:
    """The repository's own pages: each linked figure reads what its curated file holds."""
    found = [figure for page in figures.pages() for figure in figures_in(page)]
    assert found, "no page cites a measured figure"
    assert problems(found) == [], "\n".join(problems(found))


def test_the_index_of_measured_files_is_generated_from_them() -> None:
    assert figures.INDEX.read_text() == figures.index(), (
        "labs/measured/README.md differs from the files in labs/measured/: run .venv/bin/python -m labs.figures --write"
    )


@pytest.mark.parametrize("path", sorted(figures.MEASURED.glob("*.json")), ids=lambda path: path.name)
def test_every_curated_file_names_its_machine_its_command_and_what_it_measured(path: Path) -> None:
    envelope, payload = load(path)
    machine = envelope.machine
    assert machine.cpu_model and machine.usable_cores >= 1 and machine.isa != "other", machine
    assert envelope.command.strip() and envelope.created_utc[:4].isdigit(), envelope
    assert payload.get(figures.ABOUT, "").strip(), f"{path.name} says nothing of what it measured"


@pytest.mark.parametrize(("page", "most"), PAGE_MAX_LINES.items())
def test_the_guide_and_the_throughput_page_stay_short(page: str, most: int) -> None:
    assert len((ROOT / page).read_text().splitlines()) <= most


@pytest.mark.parametrize(("page", "heading"), TIMES.items())
def test_the_times_a_newcomer_plans_around_are_measured_per_kind_of_cpu(page: str, heading: str) -> None:
    text = (ROOT / page).read_text()
    assert heading in text, f"{page} has no {heading!r} section"
    table = [line for line in text.split(heading, 1)[1].split("\n\n##", 1)[0].splitlines() if line.startswith("|")]
    header, _, *rows = table
    assert [cell.strip() for cell in header.strip("|").split("|")][1:] == list(ISAS[page]), header
    assert rows, f"{page}: no times under {heading!r}"
    for row in rows:
        for cell in [cell.strip() for cell in row.strip("|").split("|")][1:]:
            assert FIGURE.search(cell) or cell == NOT_MEASURED, f"{page}: {cell!r} is no figure, nor {NOT_MEASURED!r}"


def test_no_page_quotes_a_measured_figure_outside_a_link_to_its_file() -> None:
    """Every figure in a page's prose (tests/labs/unlinked.py says what that is) links its results file, or is one
    UNLINKED names in its sentence: a setting, arithmetic, the seed's figure or a goal."""
    typed = []
    for page in figures.pages():
        name = str(page.relative_to(ROOT))
        if page.parent == figures.MEASURED:
            continue
        text = prose(page)
        allowed = [span for item in UNLINKED if item.page == name for span in item.spans(text)]
        for line, match in quoted(text):
            if not any(start <= match.start() and match.end() <= end for start, end in allowed):
                typed.append(f"{name}:{line}: {' '.join(match.group().split())}")
    assert not typed, (
        "figures typed into a page instead of linked to their results file (or, if no measurement, named in "
        "tests/labs/unlinked.py with their kind and why):\n" + "\n".join(typed)
    )


@pytest.mark.parametrize("item", UNLINKED, ids=lambda item: f"{item.page}: {item.words}")
def test_each_unlinked_figure_is_on_its_page_and_says_why(item: Unlinked) -> None:
    """No entry outlives its sentence, allows no figure, or lacks a reason; the seed's figures say they are."""
    text = prose(ROOT / item.page)
    assert item.spans(text), f"{item.page} no longer says {item.words!r}: drop its entry"
    assert QUANTITY.search(item.words), f"{item.words!r} holds no figure"
    assert item.why.strip(), item
    if item.kind is Kind.SEED:
        assert re.search(r"\bseed|\bcourse", item.words, re.IGNORECASE), f"{item.words!r} does not say it is the seed's"


@pytest.mark.parametrize(
    ("text", "figures"),
    [
        ("the kit took 24.8 s, 3 sec, 27 ms and 15\nminutes", ["24.8 s", "3 sec", "27 ms", "15\nminutes"]),
        (
            "5x and 1.23x, 26–28 GB/s, 163 MB, ≈3.5 GB, 2 GiB, 0.89%",
            ["5x", "1.23x", "26–28 GB/s", "163 MB", "3.5 GB", "2 GiB", "0.89%"],
        ),
        ("a minute or two, under a millisecond, a tenth of it", ["a minute", "a millisecond", "a tenth"]),
        ("two seconds, three times, a second or more", ["two seconds", "three times", "a second or"]),
        ("a second vLLM, 3 sequences, 32 x 1,024, v0.10, 0x1f, 8,192 tokens", []),
    ],
)
def test_what_counts_as_a_quoted_figure(text: str, figures: list[str]) -> None:
    assert [match.group() for _, match in quoted(text)] == figures


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        ("/arms/name=kit/points/concurrency=16/tok_s", 216.4),
        ("/arms/1/points/0/tok_s", 83.6),
        ("/ratios/a~1b/16", 3.4512),
        ("/tokens", 46592),
        ("", DOCUMENT),
    ],
)
def test_a_pointer_reaches_into_objects_lists_and_named_elements(pointer: str, value: object) -> None:
    assert resolve(DOCUMENT, pointer) == value


@pytest.mark.parametrize(
    ("pointer", "words"),
    [
        ("/arms/name=vllm/points", "0 elements have name=vllm"),
        ("/arms/7", "nothing at '7'"),
        ("/ratios/missing", "nothing at 'missing'"),
        ("/tokens/1", "nothing at '1'"),
    ],
)
def test_a_pointer_to_nothing_says_where_it_stopped(pointer: str, words: str) -> None:
    with pytest.raises(FigureError, match=words):
        resolve(DOCUMENT, pointer)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3.45x", 3.4512),
        ("3.5x", 3.4512),
        ("25.5 tok/s", 25.46),
        ("+0.89%", 0.0089),
        ("1%", 0.0089),
        ("46,592", 46592),
        ("46,592 tokens", 46592),
        ("24.6 s", 24.6),
        ("27 ms", 27.2),
        ("−5 ms", -5.0),
        ("42.0 GB/s", 42.0),
        ("0.20x", 0.2),
    ],
)
def test_a_figure_shows_its_value_rounded_to_the_digits_it_shows(text: str, value: float) -> None:
    assert mismatch(text, value) is None


@pytest.mark.parametrize(
    ("text", "value", "words"),
    [
        ("3.46x", 3.4512, "rounded to 2 decimals: 3.45"),
        ("0.89%", 0.89, "x 100 rounded to 2 decimals: 89.00"),
        ("5 ms", -5.0, "the page shows '5 ms'"),
        ("46592", 46591, "46591"),
        ("about 3x", 3.0, "is not a figure"),
        ("3 apples", 3.0, "is not a figure"),
        ("3x", "3", "not a number"),
        ("1x", True, "not a number"),
    ],
)
def test_a_figure_that_is_not_its_value_says_both(text: str, value: object, words: str) -> None:
    why = mismatch(text, value)
    assert why is not None and words in why, why


@pytest.mark.parametrize(
    ("text", "pointer", "why"),
    [
        ("2.7 GB", "/run/downloaded_bytes", None),
        ("163 MB", "/weight_bytes", None),
        ("0.5 GiB", "/kv_bytes", None),
        ("2.8 GB", "/run/downloaded_bytes", "in GB rounded to 1 decimals: 2.7"),
        ("2.7 GB", "/run/downloaded", "the file 2700000000.0"),
    ],
)
def test_a_bytes_key_shows_in_mb_gb_or_gib(text: str, pointer: str, why: str | None) -> None:
    value = {"/run/downloaded_bytes": 2.7e9, "/weight_bytes": 163_000_000, "/kv_bytes": 2**29}.get(pointer, 2.7e9)
    found = mismatch(text, value, pointer)
    assert found is None if why is None else (found is not None and why in found), found


def test_a_page_citing_a_stale_or_uncurated_file_fails_with_the_line(tmp_path: Path) -> None:
    measured = tmp_path / "measured"
    machine = MachineFacts("AMD EPYC", 2, 2, None, ("avx2",), None, None)
    envelope = Envelope(1, "0.1.0", "python -m benchmarks.x", machine)
    write(measured / "run.json", envelope, {figures.ABOUT: "a test run", **DOCUMENT})
    write(tmp_path / "elsewhere.json", envelope, DOCUMENT)
    page = tmp_path / "page.md"
    page.write_text(
        "The kit ran [25.5 tok/s](measured/run.json#/arms/name=kit/points/concurrency=1/tok_s) and\n"
        "then [217 tok/s](measured/run.json#/arms/name=kit/points/concurrency=16/tok_s), a plain [link](run.md);\n"
        "[3.45x](elsewhere.json#/ratios/a~1b/16) [9x](measured/gone.json#/x) [1x](measured/run.json#/nothing)\n"
    )
    found = figures_in(page)
    assert [(figure.line, figure.text) for figure in found] == [
        (1, "25.5 tok/s"),
        (2, "217 tok/s"),
        (3, "3.45x"),
        (3, "9x"),
        (3, "1x"),
    ]
    reported = problems(found, measured)
    assert len(reported) == 4, reported
    assert "page.md:2: [217 tok/s]" in reported[0] and "216.4" in reported[0]
    assert "cite a curated results file in labs/measured/" in reported[1]
    assert "cannot read" in reported[2] and "nothing at 'nothing'" in reported[3]
    assert problems([Figure(page, 1, "25.5 tok/s", "measured/run.json", "/arms/0/points/0/tok_s")], measured) == []


def test_keep_copies_a_results_file_with_its_envelope_and_about_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(figures, "MEASURED", tmp_path / "measured")
    source = write(tmp_path / "results.json", Envelope.now("python -m labs.loadtest --rate 5"), DOCUMENT)
    kept = figures.keep(source, "loadtest-avx2-2026-12-03", "the default scenario")
    envelope, payload = load(kept)
    assert kept.name == "loadtest-avx2-2026-12-03.json" and envelope == load(source)[0]
    assert payload == {figures.ABOUT: "the default scenario", **DOCUMENT}
    assert "## [`loadtest-avx2-2026-12-03.json`]" in figures.index(tmp_path / "measured")
    assert "- command: `python -m labs.loadtest --rate 5`" in figures.index(tmp_path / "measured")
