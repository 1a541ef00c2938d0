"""Command lines the kit's way: every numeric argument validated, every mistake one line on stderr, exit 2.

Used by every `python -m ...` of the kit (serve, client, labs, benchmarks), so a bad value never reaches the
run as a traceback: `--rate inf`, `--interval-s nan` or `--max-model-len 0` are refused where they are typed.
A flag's value is checked by the same parser as the setting of its kind (ui/values.py), and refused in
the command line's words: `'0' is not a whole number greater than 0`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn, TypeVar

from ui import values
from ui.values import SettingsError

T = TypeVar("T")


class KitArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line: `error: PROG: what is wrong (see --help)`, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def _flag_value(parse: Callable[[str, str], T], text: str, what: str) -> T:
    """`text` through a settings parser; refused as argparse refuses a value: `'TEXT' is not WHAT`."""
    try:
        return parse("", text)
    except SettingsError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def positive_int(text: str) -> int:
    return _flag_value(values.positive_int, text, "a whole number greater than 0")


def non_negative_int(text: str) -> int:
    return _flag_value(values.non_negative_int, text, "a whole number, 0 or more")


def positive_ints(text: str) -> list[int]:
    """A comma-separated list of whole numbers > 0 (load points: `--concurrency 1,4,8,16`, `--users 1,16`)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers > 0 separated by commas, e.g. 1,4,8,16")
    return values


def positive_floats(text: str) -> list[float]:
    """A comma-separated list of finite numbers > 0 (load points: `--sweep-rate 5,10,25`)."""
    try:
        return [values.positive_number("", part) for part in text.split(",")]
    except SettingsError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give finite numbers > 0 separated by commas, e.g. 5,10,25"
        ) from None


def tcp_port(text: str) -> int:
    return _flag_value(values.tcp_port, text, "a TCP port (1-65535)")


def positive_float(text: str) -> float:
    return _flag_value(values.positive_number, text, "a finite number greater than 0")


def non_negative_float(text: str) -> float:
    return _flag_value(values.non_negative_number, text, "a finite number, 0 or more")


def fraction(text: str) -> float:
    return _flag_value(values.fraction, text, "a fraction greater than 0 and at most 1")
