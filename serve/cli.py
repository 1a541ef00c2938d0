"""Command lines the kit's way: every numeric argument validated, every mistake one line on stderr, exit 2.

Used by every `python -m ...` of the kit (serve, client, labs, benchmarks), so a bad value never reaches the
run as a traceback: `--rate inf`, `--interval-s nan` or `--max-model-len 0` are refused where they are typed.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn


class KitArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line: `error: PROG: what is wrong (see --help)`, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def _number(kind: type, text: str, what: str, ok: Callable[[float], bool]) -> float:
    try:
        value = kind(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not math.isfinite(value) or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def positive_int(text: str) -> int:
    return int(_number(int, text, "a whole number greater than 0", lambda value: value > 0))


def non_negative_int(text: str) -> int:
    return int(_number(int, text, "a whole number, 0 or more", lambda value: value >= 0))


def positive_ints(text: str) -> list[int]:
    """A comma-separated list of whole numbers > 0 (load points: `--concurrency 1,4,8,16`, `--users 1,16`)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers > 0 separated by commas, e.g. 1,4,8,16")
    return values


def tcp_port(text: str) -> int:
    return int(_number(int, text, "a TCP port (1-65535)", lambda value: 1 <= value <= 65535))


def positive_float(text: str) -> float:
    return _number(float, text, "a finite number greater than 0", lambda value: value > 0)


def non_negative_float(text: str) -> float:
    return _number(float, text, "a finite number, 0 or more", lambda value: value >= 0)


def fraction(text: str) -> float:
    return _number(float, text, "a fraction greater than 0 and at most 1", lambda value: 0 < value <= 1)
