"""labs/quantities.py: a quantity the pages state has one current value, rendered from the table into every page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from labs import figures, quantities
from labs.figures import Figure
from labs.quantities import BY_NAME, QUANTITIES, TITLES, Isa, Quantity, file_isa, problems, problems_of, rendered
from labs.results import load
from tests.conftest import ROOT

# A figure of time in the code's user-facing strings: "12 s", "~1 min", "3 hours", "a few minutes", "under a minute"
TIME_IN_CODE = re.compile(
    r"(?<![\w.,/])\d[\d,.]*\s?(?:s|sec|seconds?|min|minutes?|h|hours?)(?![\w/])"
    r"|\b(?:a few|several|under an?|a|one|two|three)\s+(?:minutes?|hours?)\b",
    re.IGNORECASE,
)
CODE = ("serve", "ui", "client", "labs", "benchmarks")


def test_no_page_states_a_value_for_a_quantity_other_than_the_tables() -> None:
    found = problems()
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("page", figures.pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_each_page_is_rendered_from_the_table(page: Path) -> None:
    assert rendered(page, page.read_text()) == page.read_text(), (
        f"{page.relative_to(ROOT)} differs from labs/quantities.py: run .venv/bin/python -m labs.quantities --write"
    )


@pytest.mark.parametrize("quantity", QUANTITIES, ids=lambda quantity: quantity.name)
def test_each_quantity_is_measured_where_it_says_on_the_cpu_it_says(quantity: Quantity) -> None:
    for isa, where in quantity.measured.items():
        assert (figures.MEASURED / where.file).is_file(), where
        assert quantity.measures(where.file, where.pointer), f"{where.location} is none of {quantity.runs}"
        assert file_isa(where.file) == isa.value, f"{where.file} measured {file_isa(where.file)}, not {isa.value}"
        value = figures.resolve(load(figures.MEASURED / where.file)[1], where.pointer)
        assert figures.mismatch(quantity.text(isa), value, where.pointer) is None, (quantity.name, isa)


def test_a_quantity_is_named_once() -> None:
    assert len(BY_NAME) == len(QUANTITIES) and len(TITLES) == len(QUANTITIES) * len(Isa)


def test_the_readme_time_table_has_a_row_per_quantity_and_a_column_per_cpu() -> None:
    table = quantities.time_table().splitlines()
    assert table[0] == "| | " + " | ".join(isa.value for isa in Isa) + " |"
    assert len(table) == 2 + len(quantities.TIME_ROWS)
    assert quantities.time_table() in quantities.README.read_text()


PAGE = ROOT / "labs" / "page.md"
CURRENT = BY_NAME["warm-up"].measured[Isa.AVX512]
SHOWN = BY_NAME["warm-up"].text(Isa.AVX512)  # the table's value, read from its file


@pytest.mark.parametrize(
    ("figure", "words"),
    [
        (Figure(PAGE, 1, "99 s", f"measured/{CURRENT.file}", CURRENT.pointer, "warm-up"), f"the table says [{SHOWN}]"),
        (Figure(PAGE, 1, SHOWN, f"measured/{CURRENT.file}", CURRENT.pointer, "nothing"), "no quantity is named"),
        (Figure(PAGE, 1, SHOWN, f"measured/{CURRENT.file}", CURRENT.pointer), "this is 'warm-up': name it"),
        (
            Figure(PAGE, 1, "27 s", "measured/first-token-avx512-2026-12-06.json", "/warm_up_s"),
            "an older run of 'warm-up'",
        ),
        (Figure(PAGE, 1, "1 s", "measured/x.json", "/suite"), "no measurement on AVX-512 + BF16"),
    ],
)
def test_a_figure_that_disagrees_with_the_table_says_how(figure: Figure, words: str) -> None:
    if figure.quantity is None and words.startswith("no measurement"):
        figure = Figure(PAGE, 1, "1 s", "measured/x.json", "/suite", "suite")
    why = problems_of(figure)
    assert why is not None and words in why, why


def test_a_figure_the_table_agrees_with_passes() -> None:
    link = BY_NAME["warm-up"].link(Isa.AVX512, PAGE)
    (figure,) = [Figure(PAGE, 1, *match.groups()) for match in figures.FIGURE.finditer(link)]
    assert problems_of(figure) is None
    assert problems_of(Figure(PAGE, 1, "3 s", "measured/knobs-avx512-2026-11-29.json", "/x")) is None


def _strings(path: Path) -> list[ast.Constant]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_codes_user_facing_strings_state_no_time_of_their_own() -> None:
    """A step title or help text that says how long something takes ("~1 min") is a figure no results file holds:
    the code says what it does, and the pages say how long, from labs/quantities.py."""
    typed = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {match.group()!r}"
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in _strings(path)
        for match in TIME_IN_CODE.finditer(str(node.value))
    ]
    assert typed == [], "\n".join(typed)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("once, ~1 min", ["1 min"]),
        ("it starts in under a minute", ["under a minute"]),
        ("the same sections (a few minutes)", ["a few minutes"]),
        ("k8s, e2e p99 s, rbac.authorization.k8s.io/v1, a second vLLM, port 8009", []),
    ],
)
def test_what_counts_as_a_time_in_the_code(text: str, found: list[str]) -> None:
    assert [match.group() for match in TIME_IN_CODE.finditer(text)] == found
