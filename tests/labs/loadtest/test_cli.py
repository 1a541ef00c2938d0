"""The load tester's command line: bad input and a missing engine give one line that names the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port

QUIET_ENV = {"PATH": "/usr/bin:/bin", "KIT_ENV_FILE": str(ROOT / ".env.example")}


def loadtest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labs.loadtest", *args],
        cwd=ROOT,
        env=QUIET_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_engine_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    result = loadtest("--base-url", f"http://127.0.0.1:{free_port()}/v1", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: cannot reach an engine at") and "bash up.sh" in result.stderr
    assert "Traceback" not in result.stderr and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--requests", "0"], "python -m labs.loadtest: argument --requests: '0' is not a whole number greater than 0"),
        (["--lengths", "zipf"], "--lengths 'zipf' is invalid: use fixed:64"),
        (
            ["--sweep-rate", "5,x"],
            "python -m labs.loadtest: argument --sweep-rate: '5,x': give finite numbers > 0 separated by commas",
        ),
        (["--endpoint", "vllm"], "--endpoint 'vllm' is invalid: write NAME=URL[@MODEL]"),
        (["--prompts", "/nonexistent/prompts.txt"], "--prompts /nonexistent/prompts.txt cannot be read"),
        (["--warmup", "-1"], "python -m labs.loadtest: argument --warmup: '-1' is not a whole number, 0 or more"),
    ],
)
def test_bad_input_is_one_line_naming_the_fix(args: list[str], message: str) -> None:
    result = loadtest(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {message}") and result.stderr.count("\n") == 1, result.stderr
