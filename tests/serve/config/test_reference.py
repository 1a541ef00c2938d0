"""The settings reference in serve/config/README.md is generated from the Settings fields, and equal to them."""

from __future__ import annotations

from serve.config import reference
from serve.config.settings import KNOBS
from serve.config.vllm_flags import setting_becomes


def test_the_page_holds_the_table_the_settings_fields_generate() -> None:
    assert reference.section(reference.PAGE.read_text()) == reference.table(), (
        "serve/config/README.md's settings reference differs from the Settings fields: "
        "run .venv/bin/python -m serve.config.reference --write"
    )


def test_the_table_has_every_setting_once_with_its_default_and_why() -> None:
    rows = reference.table().splitlines()[2:]
    assert len(rows) == len(KNOBS)
    for row, knob in zip(rows, KNOBS, strict=True):
        variable, default, becomes, why = (cell.strip() for cell in row.strip("|").split(" | ", 3))
        assert variable == f"`{knob.env}`"
        assert default == (f"`{knob.default}`" if knob.default else "(empty)")
        assert becomes == (", ".join(f"`{item}`" for item in setting_becomes().get(knob.env, [])) or "-")
        assert why.replace("\\|", "|") == knob.why


def test_every_flag_and_variable_of_the_mapping_is_some_settings() -> None:
    """The one mapping reads only declared settings, so the reference names each flag vLLM gets beside one."""
    assert set(setting_becomes()) <= {knob.env for knob in KNOBS}
    named = [item for knob in KNOBS for item in setting_becomes().get(knob.env, [])]
    assert sorted(named) == sorted(item for items in setting_becomes().values() for item in items)


def test_rewriting_a_stale_page_restores_the_table() -> None:
    page = reference.PAGE.read_text()
    stale = page.replace(reference.table(), "| variable | default | why |\n|---|---|---|\n| `OLD` | `1` | gone |")
    assert reference.section(stale) != reference.table()
    assert reference.rewritten(stale) == page
