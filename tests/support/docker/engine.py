"""A real Docker engine for the Docker-track tests: the one that answers, or a dockerd started here.

CI runs as root on a fresh machine with Debian's docker.io installed (tests/system-packages.sh) and no daemon
running: the fixture starts `dockerd` (its log in .kit/logs/dockerd-tests.log), and stops what it started,
and only that, when the module's tests are done. It is module-scoped so that the rest of the suite never
sees an engine it did not ask for (RUNTIME=auto would pick Docker).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from serve.processes.process import group_members, spawn, stop_group
from tests.conftest import ROOT

LOG = ROOT / ".kit" / "logs" / "dockerd-tests.log"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 60  # dockerd gives running containers 10 s each, then stops its containerd


@dataclass(frozen=True, slots=True)
class DockerDaemon:
    started_pid: int | None  # the dockerd this harness started; None when one already answered

    @property
    def ours(self) -> bool:
        return self.started_pid is not None


def answers(timeout_s: float = 10) -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=timeout_s).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def start() -> DockerDaemon:
    """The engine that answers, else a dockerd started now (pytest.fail naming the fix if it cannot be)."""
    if shutil.which("docker") is None:
        pytest.fail("no docker command: run bash tests/system-packages.sh (installs Debian's docker.io)")
    if answers():
        return DockerDaemon(None)
    if shutil.which("dockerd") is None:
        pytest.fail("no Docker engine answers and dockerd is missing: run bash tests/system-packages.sh")
    if os.geteuid() != 0:
        pytest.fail("no Docker engine answers, and starting dockerd needs root: run the tests as root, as CI does")
    LOG.parent.mkdir(parents=True, exist_ok=True)
    pid = spawn(["dockerd"], LOG, dict(os.environ), cwd=ROOT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers(timeout_s=5):
        if not group_members(pid) or time.monotonic() > deadline:
            stop_group(pid, grace_s=10)
            pytest.fail(
                f"dockerd did not answer within {START_TIMEOUT_S} s; its log: {LOG}\n"
                + "\n".join(LOG.read_text(errors="replace").splitlines()[-15:])
            )
        time.sleep(0.5)
    return DockerDaemon(pid)


def stop(engine: DockerDaemon) -> None:
    """Stop the dockerd this harness started (it stops its containers and containerd first); nothing else."""
    if engine.started_pid is None:
        return
    try:
        os.kill(engine.started_pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while alive(engine.started_pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    stop_group(engine.started_pid, grace_s=10)  # whatever of its group is left (its containerd)


@pytest.fixture(scope="module")
def docker_engine() -> Iterator[DockerDaemon]:
    engine = start()
    yield engine
    stop(engine)
