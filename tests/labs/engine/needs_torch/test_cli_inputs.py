"""The teaching engine's command lines (they need torch, so they run here): any value of a numeric flag gives a
result or one line on stderr with exit status 2, never a traceback. The light ones: tests/ui/test_cli.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tests.support.cli_inputs import VALUES, Case, check

CASES = [
    Case(
        "labs.engine.experiment",
        [],
        {
            "--requests": "positive_int",
            "--rate": "positive_float",
            "--short-tokens": "positive_int",
            "--long-tokens": "positive_int",
            "--block-size": "positive_int",
            "--num-blocks": "positive_int",
            "--max-model-len": "positive_int",
            "--threads": "positive_int",
            "--seed": "non_negative_int",
        },
    ),
    Case(
        "labs.engine.server",
        [],
        {
            "--port": "tcp_port",
            "--max-batch": "positive_int",
            "--block-size": "positive_int",
            "--num-blocks": "positive_int",
            "--threads": "positive_int",
        },
    ),
    Case(
        "benchmarks.engine_speed",
        [],
        {"--new-tokens": "positive_int", "--repeats": "positive_int", "--threads": "positive_int"},
    ),
]
FLAGS = [(case, flag) for case in CASES for flag in case.flags]


@pytest.mark.parametrize(("case", "flag"), FLAGS, ids=[f"{case.module}:{flag}" for case, flag in FLAGS])
@settings(max_examples=40, deadline=None)
@given(value=VALUES)
def test_any_value_is_a_result_or_one_line_and_exit_2(case: Case, flag: str, value: str) -> None:
    check(case, flag, value)
