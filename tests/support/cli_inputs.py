"""Drive a command line's real entry point with any value for a numeric flag, stopping right after parsing.

Each case names a module, the arguments it needs anyway, and its numeric flags with what they accept.
`outcome` returns what the parser did with a value: the parsed number, or the exit status and stderr.
Shared by tests/ui/test_cli.py (light venv) and tests/labs/engine/needs_torch/test_cli_inputs.py (torch's CLIs).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from ui.cli import KitArgumentParser

ACCEPTS: dict[str, Callable[[Any], bool]] = {
    "positive_int": lambda value: isinstance(value, int) and value > 0,
    "non_negative_int": lambda value: isinstance(value, int) and value >= 0,
    "tcp_port": lambda value: isinstance(value, int) and 1 <= value <= 65535,
    "positive_float": lambda value: math.isfinite(value) and value > 0,
    "non_negative_float": lambda value: math.isfinite(value) and value >= 0,
    "fraction": lambda value: 0 < value <= 1,
    "positive_ints": lambda values: bool(values) and all(isinstance(v, int) and v > 0 for v in values),
    "positive_floats": lambda values: bool(values) and all(math.isfinite(v) and v > 0 for v in values),
}
# what a user may type: numbers of every kind, their spellings, and text that is no number at all
VALUES = st.one_of(
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(
        [
            "inf",
            "-inf",
            "nan",
            "NaN",
            "0",
            "-0",
            "-1",
            "1e309",
            "1e-400",
            "0x10",
            "1_000",
            "",
            " ",
            "١",
            "3.",
            ".5",
            "1e3",
            "12abc",
            "True",
        ]
    ),
    st.text(max_size=8),
)


@dataclass(frozen=True)
class Case:
    module: str
    base: list[str]
    flags: dict[str, str] = field(default_factory=dict)  # flag -> a key of ACCEPTS


class Parsed(Exception):
    def __init__(self, namespace: object) -> None:
        self.namespace = namespace


def outcome(case: Case, flag: str, value: str) -> tuple[str, object, str]:
    """("parsed", the flag's value, "") or ("exit", status, stderr). Anything else propagates (a traceback)."""
    original = KitArgumentParser.parse_args
    module = importlib.import_module(case.module)

    def parse_then_stop(self: KitArgumentParser, args: list[str] | None = None, namespace: object = None) -> object:
        raise Parsed(original(self, args, namespace))

    argv = [*case.base, flag, value]  # as typed; a value such as -1 then reads as a flag, also an error
    stderr = io.StringIO()
    KitArgumentParser.parse_args = parse_then_stop  # type: ignore[method-assign]
    saved_argv = sys.argv
    try:
        with contextlib.redirect_stderr(stderr):
            if inspect.signature(module.main).parameters:
                module.main(argv)
            else:
                sys.argv = [case.module, *argv]
                module.main()
    except Parsed as parsed:
        return "parsed", getattr(parsed.namespace, flag.lstrip("-").replace("-", "_")), ""
    except SystemExit as exited:
        return "exit", exited.code, stderr.getvalue()
    finally:
        KitArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv = saved_argv
    raise AssertionError(f"{case.module} {argv} neither parsed nor exited")


def check(case: Case, flag: str, value: str) -> None:
    kind, result, detail = outcome(case, flag, value)
    if kind == "parsed":
        assert ACCEPTS[case.flags[flag]](result), f"{case.module} accepted {flag}={value!r} as {result!r}"
    else:
        lines = detail.splitlines()
        assert result == 2 and len(lines) == 1 and lines[0].startswith("error: "), (case.module, flag, value, detail)
