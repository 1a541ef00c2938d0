"""The stand-in for openeuler/vllm-cpu (tests/support/docker/standin.sh), built once and reused while its inputs
hold."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, run_bounded
from tests.support.docker.engine import DockerDaemon

STANDIN_SCRIPT = ROOT / "tests" / "support" / "docker" / "standin.sh"
BUILD_TIMEOUT_S = 900  # debootstrap (~2 min) and importing ~4 GB (~2 min) the first time; seconds after


def build_standin() -> str:
    """The stand-in's image reference (standin.sh's last line); the test fails with its output if it fails."""
    result = run_bounded(["bash", str(STANDIN_SCRIPT)], None, BUILD_TIMEOUT_S)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        pytest.fail(f"tests/support/docker/standin.sh failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return lines[-1]


@pytest.fixture(scope="module")
def standin_image(docker_engine: DockerDaemon) -> str:
    return build_standin()
