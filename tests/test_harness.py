"""The harness itself: a command that hangs fails its own test, shows what it printed, and leaves nothing running.

A documented command with background clients (labs/metrics.md's burst) once outlived its test's timeout: only
the shell was killed, its 32 curl loops went on saturating the session server for an hour, and eight later
tests timed out behind them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import kit_env
from tests.support.docs import run_doc


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_hung_command_fails_with_its_output_and_stops_its_background_jobs(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    command = f"echo $$ > {pids}; for i in 1 2; do sleep 600 & echo $! >> {pids}; done; echo clients started; sleep 600"
    with pytest.raises(pytest.fail.Exception) as failure:
        run_doc(command, kit_env(), timeout_s=2)
    message = str(failure.value)
    assert "still running after 2 s" in message and "clients started" in message and "%Cpu(s)" in message
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 3 and not [pid for pid in started if alive(pid)]  # the shell and its two clients


def test_kit_commands_run_natively_unless_a_test_names_its_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """.env.example's RUNTIME=auto picks Docker wherever an engine answers: a test that left it to auto passed or
    failed with whatever ran on the machine (issue 28), and a developer's exported RUNTIME must not decide either."""
    monkeypatch.setenv("RUNTIME", "docker")
    assert kit_env()["RUNTIME"] == "native"
    assert kit_env(VLLM_PORT="8100")["RUNTIME"] == "native"
    assert kit_env(RUNTIME="auto")["RUNTIME"] == "auto"
