"""What every reading is made of: a headline, sentences and tables; and how a measured number is shown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from labs.tour.outline import Seed


@dataclass(frozen=True, slots=True)
class Table:
    headers: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    caption: str = ""


@dataclass(frozen=True, slots=True)
class Reading:
    headline: str  # this machine's figure, in a few words
    sentences: list[str]
    tables: list[Table] = field(default_factory=list)
    seed: Seed | None = None


def number(value: float | None, digits: int = 0, unit: str = "") -> str:
    """A measured value as the report shows it; JSON's null (a metric with no sample) as a dash."""
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{unit}"


def ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def times(value: float | None, digits: int = 2) -> str:
    return number(value, digits, "x")
