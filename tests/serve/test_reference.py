"""The settings reference in serve/config/README.md is generated from the Settings fields, and equal to them."""

from __future__ import annotations

from serve.config import reference
from serve.config.settings import KNOBS


def test_the_page_holds_the_table_the_settings_fields_generate() -> None:
    assert reference.section(reference.PAGE.read_text()) == reference.table(), (
        "serve/config/README.md's settings reference differs from the Settings fields: "
        "run .venv/bin/python -m serve.config.reference --write"
    )


def test_the_table_has_every_setting_once_with_its_default_and_why() -> None:
    rows = reference.table().splitlines()[2:]
    assert len(rows) == len(KNOBS)
    for row, knob in zip(rows, KNOBS, strict=True):
        variable, default, why = (cell.strip() for cell in row.strip("|").split(" | ", 2))
        assert variable == f"`{knob.env}`"
        assert default == (f"`{knob.default}`" if knob.default else "(empty)")
        assert why.replace("\\|", "|") == knob.why


def test_rewriting_a_stale_page_restores_the_table() -> None:
    page = reference.PAGE.read_text()
    stale = page.replace(reference.table(), "| variable | default | why |\n|---|---|---|\n| `OLD` | `1` | gone |")
    assert reference.section(stale) != reference.table()
    assert reference.rewritten(stale) == page
