"""The value parsers that settings and command lines share: the ground floor, importing nothing of the kit.

A parser takes the name of what is being set and its text, and returns the value or raises SettingsError whose one
line names the variable, the bad value and the fix. serve/config/settings.py declares every setting with these (and
its own); ui/cli.py turns the same ones into flag types, so a flag and a setting of one kind refuse the same values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


class SettingsError(ValueError):
    """A setting (or a flag) is wrong; the message names the variable, the bad value and the fix."""


def invalid(name: str, raw: str, fix: str) -> SettingsError:
    return SettingsError(f"{name}={raw!r} is invalid: {fix}")


def bounded(convert: Callable[[str], N], within: Callable[[N], bool], fix: str) -> Callable[[str, str], N]:
    """A parser of numbers: `convert` reads the value, `within` accepts it; else one line naming the fix."""

    def parse(name: str, raw: str) -> N:
        try:
            value = convert(raw)
        except ValueError:
            raise invalid(name, raw, fix) from None
        if not within(value):
            raise invalid(name, raw, fix)
        return value

    return parse


positive_int = bounded(int, lambda value: value > 0, "use a whole number greater than 0")
non_negative_int = bounded(int, lambda value: value >= 0, "use a whole number, 0 or more")
# floats: nan and inf are no sizes or fractions
positive_number = bounded(float, lambda value: 0 < value < float("inf"), "use a number greater than 0")
non_negative_number = bounded(float, lambda value: 0 <= value < float("inf"), "use a number, 0 or more")


def tcp_port(name: str, raw: str) -> int:
    value = positive_int(name, raw)
    if value > 65535:
        raise invalid(name, raw, "use a TCP port between 1 and 65535")
    return value


def choice(*options: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw not in options:
            raise invalid(name, raw, f"use one of {', '.join(options)}")
        return raw

    return parse


fraction = bounded(float, lambda value: 0 < value <= 1, "use a fraction greater than 0 and at most 1, such as 0.90")
