"""labs/engine.md's reading table names every module of labs/engine/, so a reader meets none unannounced."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PAGE = ROOT / "labs" / "engine.md"
ENGINE = ROOT / "labs" / "engine"


def test_the_reading_table_names_every_module_once() -> None:
    table = PAGE.read_text().split("## Read it in this order", 1)[1].split("\n\n", 2)[1]
    named = re.findall(r"`(\w+\.py)`", table)
    modules = sorted(path.name for path in ENGINE.glob("*.py") if path.name != "__init__.py")
    assert sorted(named) == modules, f"missing {set(modules) - set(named)}, twice or gone {named}"
