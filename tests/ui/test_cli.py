"""Every numeric argument of every light command line: any value gives a result or one line on stderr with
exit status 2, never a traceback (property-based: hypothesis makes the values). The teaching engine's
command lines, which need torch, have the same test in tests/labs/engine/needs_torch/test_cli_inputs.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tests.support.cli_inputs import VALUES, Case, check, outcome

CASES = [
    Case("client.__main__", ["Say OK."], {"--max-tokens": "positive_int", "--temperature": "non_negative_float"}),
    Case(
        "labs.doctor.__main__",
        [],
        {"--interval-s": "positive_float", "--samples": "positive_int", "--duration-s": "positive_float"},
    ),
    Case(
        "labs.sizing.__main__",
        ["kv"],
        {"--kv-gib": "positive_float", "--max-model-len": "positive_int", "--block-size": "positive_int"},
    ),
    Case(
        "labs.sizing.__main__",
        ["fit"],
        {
            "--gpu-gib": "positive_float",
            "--utilization": "fraction",
            "--overhead-gib": "non_negative_float",
            "--block-size": "positive_int",
        },
    ),
    Case("labs.sizing.__main__", ["verify"], {"--kv-gib": "positive_float"}),
    Case(
        "labs.loadtest.__main__",
        [],
        {
            "--requests": "positive_int",
            "--rate": "positive_float",
            "--burstiness": "positive_float",
            "--concurrency": "positive_int",
            "--seed": "non_negative_int",
            "--temperature": "non_negative_float",
            "--warmup": "non_negative_int",
            "--scrape-interval-s": "non_negative_float",
            "--sweep-rate": "positive_floats",
            "--sweep-concurrency": "positive_ints",
        },
    ),
    Case("labs.compare.__main__", [], {"--n": "positive_int", "--max-tokens": "positive_int"}),
    Case(
        "benchmarks.kit_vs_defaults",
        [],
        {
            "--requests-per-user": "positive_int",
            "--min-requests": "positive_int",
            "--rounds": "positive_int",
            "--restarts": "non_negative_int",
            "--seed": "non_negative_int",
        },
    ),
    Case(
        "benchmarks.stream_server",
        ["--port", "18123"],
        {
            "--port": "tcp_port",
            "--cpu": "non_negative_int",
            "--token-delay-ms": "non_negative_float",
            "--cut-short-after": "positive_int",
        },
    ),
    Case(
        "benchmarks.llamacpp_wheel",
        ["--llama-server", "/bin/true"],
        {"--slots": "positive_ints", "--concurrency": "positive_ints", "--rounds": "positive_int"},
    ),
    Case(
        "benchmarks.loadtest_agreement",
        [],
        {
            "--requests": "positive_int",
            "--rate": "positive_float",
            "--output-len": "positive_int",
            "--rounds": "positive_int",
            "--seed": "non_negative_int",
        },
    ),
    Case("benchmarks.loadtest_overhead", [], {"--seconds": "positive_float", "--tokens": "positive_int"}),
    Case(
        "benchmarks.step_profile",
        [],
        {"--users": "positive_ints", "--window": "positive_float", "--rate": "positive_int"},
    ),
]
FLAGS = [(case, flag) for case in CASES for flag in case.flags]


@pytest.mark.parametrize(
    ("case", "flag"), FLAGS, ids=[f"{case.module}:{' '.join(case.base)}{flag}" for case, flag in FLAGS]
)
@settings(max_examples=60, deadline=None)
@given(value=VALUES)
def test_any_value_is_a_result_or_one_line_and_exit_2(case: Case, flag: str, value: str) -> None:
    check(case, flag, value)


@pytest.mark.parametrize(
    ("module", "base", "flag", "value"),
    [
        ("labs.loadtest.__main__", [], "--rate", "inf"),
        ("labs.loadtest.__main__", [], "--rate", "nan"),
        ("labs.doctor.__main__", [], "--interval-s", "nan"),
        ("labs.sizing.__main__", ["kv"], "--max-model-len", "0"),
        ("client.__main__", ["hi"], "--temperature", "nan"),
        ("labs.loadtest.__main__", [], "--sweep-rate", "5,nan"),
        ("benchmarks.step_profile", [], "--window", "nan"),
    ],
)
def test_the_values_that_used_to_get_through_are_refused(module: str, base: list[str], flag: str, value: str) -> None:
    kind, status, stderr = outcome(Case(module, base, {flag: "positive_float"}), flag, value)
    assert (kind, status) == ("exit", 2) and stderr.startswith("error: python -m "), stderr
