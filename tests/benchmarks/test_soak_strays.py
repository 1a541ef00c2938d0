"""What the soak counts as a stray: the kit's programs left outside its servers' groups, not a shell someone runs in
the checkout meanwhile (one failed a soak that was otherwise clean)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from benchmarks.soak import checkout_processes, kit_program, strays
from serve.config.paths import ROOT


def test_the_kits_programs_count_and_a_shell_in_the_checkout_does_not() -> None:
    for command_line in (
        f"{ROOT}/.kit/vllm/bin/python -m vllm.entrypoints.openai.api_server --port 8010",
        f"{ROOT}/.venv/bin/python -m serve.processes.supervisor --label vLLM -- x",
        "VLLM::EngineCore",
        "VLLM::Worker",
        f"{ROOT}/.kit/router/bin/python -m vllm_router.launch_router --port 8009",
    ):
        assert kit_program(command_line), command_line
    for command_line in ("bash /dev/fd/3", "sleep 60", "/usr/bin/python3 -c pass"):
        assert not kit_program(command_line), command_line


def test_what_an_earlier_group_starts_meanwhile_is_not_a_stray_and_a_new_group_is(tmp_path: Path) -> None:
    """tests/run.sh's background install (its own group, started before the soak) starts pip and a check while the
    soak runs: not the soak's. A kit program in a group of its own that started during the soak is a stray."""
    later = (
        "import subprocess, sys, time; time.sleep(1); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    earlier = spawn([sys.executable, "-c", later])
    try:
        before = checkout_processes()
        assert earlier.pid in before
        deadline = time.monotonic() + 30
        while len(psutil.Process(earlier.pid).children()) == 0:
            assert time.monotonic() < deadline, "the earlier group's child never started"
            time.sleep(0.1)
        child = psutil.Process(earlier.pid).children()[0].pid
        new = spawn([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            found = [int(line.split()[0]) for line in strays([], before)]
            # these two are judged; the checkout's other programs meanwhile (the session's vLLM starting in the
            # background, beside these tests) are whatever they are
            assert new.pid in found and child not in found, (new.pid, child, strays([], before))
        finally:
            stop(new)
    finally:
        stop(earlier)


def spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=ROOT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # os.killpg, not `kill -9 -PID` (procps-ng took that for every process)
    proc.wait()
