"""up.sh / down.sh on the Docker tracks, driven through a stand-in `docker` (tests/fake_docker.py).

No Docker engine can run here, so the stand-in records what the kit asks compose to do and plays the
container's part (a /health endpoint and vLLM-like log lines). What is checked is the kit's side: the
files, profiles and services it names, the values it exports for compose to interpolate, the shared
health wait and recap, and that compose's own errors reach the user.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from serve import process
from serve.docker import COMPOSE_FILE
from serve.machine import detect
from tests.conftest import ROOT, free_port, kit_env
from tests.docs import doc_commands, is_docker_command, retarget, run_doc
from tests.fake_docker import install

pytestmark = pytest.mark.slow  # each case runs up.sh/down.sh a few times (seconds each)
PYTHON = ROOT / ".venv" / "bin" / "python"
BUILD_ERROR = "failed to solve: openeuler/vllm-cpu:0.9.1-oe2403lts: not found (stand-in)"


@dataclass(frozen=True)
class FakeDocker:
    state: Path
    env: dict[str, str]

    def calls(self) -> list[dict]:
        path = self.state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def compose_calls(self, verb: str) -> list[dict]:
        return [call for call in self.calls() if call["argv"][:1] == ["compose"] and verb in call["argv"]]

    def run(self, *argv: str, **overrides: str) -> subprocess.CompletedProcess[str]:
        """`bash up.sh`, `bash down.sh --volumes`, `python -m serve status` ... with the stand-in on PATH."""
        command = ["bash", str(ROOT / argv[0])] if argv[0].endswith(".sh") else [str(PYTHON), "-m", argv[0]]
        return subprocess.run([*command, *argv[1:]], env={**self.env, **overrides}, capture_output=True,
                              text=True, timeout=180, cwd=ROOT)


@pytest.fixture
def docker(tmp_path: Path) -> Iterator[FakeDocker]:
    state = tmp_path / "docker-state"
    state.mkdir()
    install(tmp_path / "bin")
    env = kit_env(RUNTIME="docker", VLLM_PORT=str(free_port()), GPU_PORT=str(free_port()), START_TIMEOUT="60",
                  FAKE_DOCKER_STATE=str(state), PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake = FakeDocker(state, env)
    yield fake
    fake.run("down.sh")  # never leave a stand-in engine behind


def compose_prefix() -> list[str]:
    return ["compose", "--env-file", str(ROOT / ".env.example"), "-f", str(COMPOSE_FILE)]


def test_cpu_track_builds_starts_waits_recaps_and_comes_down(docker: FakeDocker) -> None:
    port = docker.env["VLLM_PORT"]
    up = docker.run("up.sh")
    assert up.returncode == 0, up.stdout + up.stderr
    build, = docker.compose_calls("build")
    assert build["argv"] == [*compose_prefix(), "build", "vllm-cpu"]  # default profile: no --profile
    started, = docker.compose_calls("up")
    assert started["argv"] == [*compose_prefix(), "up", "-d", "--no-build", "vllm-cpu"]
    machine = detect()
    assert build["env"]["CPU_IMAGE_TAG"] == "0.9.1-oe2403lts"
    assert build["env"]["RESOLVED_DTYPE"] == ("bfloat16" if machine.bf16_flag else "float32")
    assert build["env"]["RESOLVED_OMP_THREADS"] == str(min(machine.usable_cores, 4))  # CPU_LIMIT=4
    assert build["env"]["RESOLVED_THREADS_BIND"] == "all"  # vLLM 0.9.1's word for nobind
    assert build["env"]["RESOLVED_OPTIONAL_ARGS"] == ""
    assert docker.compose_calls("logs"), "the health wait must follow the container's log"
    assert f"http://127.0.0.1:{port}/v1" in up.stdout and "docker" in up.stdout
    assert "23,296 tokens" in up.stdout  # the recap's KV line, read from the container's log

    again = docker.run("up.sh")
    assert again.returncode == 0 and "already up" in again.stdout
    assert len(docker.compose_calls("build")) == 1
    status = docker.run("serve", "status")
    assert status.returncode == 0 and "healthy" in status.stdout

    down = docker.run("down.sh")
    assert down.returncode == 0, down.stdout + down.stderr
    assert docker.compose_calls("down")[-1]["argv"] == [*compose_prefix(), "down"]
    assert "model cache volume is kept" in down.stdout
    assert process.port_is_free("127.0.0.1", int(port))
    twice = docker.run("down.sh")
    assert twice.returncode == 0 and "Nothing to stop" in twice.stdout


def test_gpu_track_uses_its_profile_image_port_and_quantization(docker: FakeDocker) -> None:
    gpu_port = docker.env["GPU_PORT"]
    up = docker.run("up.sh", RUNTIME="docker-gpu", QUANTIZATION="awq", ENFORCE_EAGER="true")
    assert up.returncode == 0, up.stdout + up.stderr
    assert docker.compose_calls("build") == []
    pull, = docker.compose_calls("pull")
    assert pull["argv"] == [*compose_prefix(), "--profile", "gpu", "pull", "vllm-gpu"]
    assert pull["env"]["GPU_IMAGE"] == "vllm/vllm-openai:v0.11.0"
    assert pull["env"]["RESOLVED_OPTIONAL_ARGS"] == "--enforce-eager --quantization awq"
    assert docker.compose_calls("up")[0]["argv"][-4:] == ["up", "-d", "--no-build", "vllm-gpu"]
    assert f"http://127.0.0.1:{gpu_port}/v1" in up.stdout

    down = docker.run("down.sh", "--volumes", RUNTIME="docker-gpu")
    assert down.returncode == 0, down.stdout + down.stderr
    assert docker.compose_calls("down")[-1]["argv"] == [*compose_prefix(), "--profile", "gpu", "down", "--volumes"]
    assert "model cache volume is removed" in down.stdout


def test_a_failing_compose_build_surfaces_its_error_and_starts_nothing(docker: FakeDocker) -> None:
    (docker.state / "fail-build").write_text(BUILD_ERROR + "\n")
    up = docker.run("up.sh")
    assert up.returncode == 1
    assert BUILD_ERROR in up.stdout and "Building the patched CPU image" in up.stdout
    assert [line for line in up.stderr.splitlines() if line.startswith("error:")]
    assert docker.compose_calls("up") == []


def test_a_container_that_dies_during_start_shows_its_log_and_is_taken_down(docker: FakeDocker) -> None:
    (docker.state / "crash").write_text("")
    up = docker.run("up.sh")
    assert up.returncode == 1
    assert "the server exited during start" in up.stderr
    assert "ZeroDivisionError" in up.stderr  # the container's own last words, via compose logs
    assert docker.compose_calls("down"), "a crashed container (restart: unless-stopped) must be taken down"


def test_runtime_auto_picks_docker_when_an_engine_with_compose_answers(docker: FakeDocker) -> None:
    result = docker.run("serve", "status", RUNTIME="auto")
    assert result.returncode == 3 and "down: no vLLM" in result.stdout
    assert [call["argv"][:2] for call in docker.calls()][:2] == [["info"], ["compose", "version"]]
    assert docker.compose_calls("ps")[0]["argv"][-3:] == ["ps", "-q", "vllm-cpu"]


def test_a_cpu_image_without_swap_space_is_refused_before_anything_runs(docker: FakeDocker) -> None:
    up = docker.run("up.sh", CPU_IMAGE_TAG="0.18.0-oe2403lts")
    assert up.returncode == 2
    errors = [line for line in up.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "CPU_IMAGE_TAG='0.18.0-oe2403lts' is invalid" in errors[0]
    assert docker.compose_calls("build") == []


def test_readme_docker_commands_run_as_documented(docker: FakeDocker) -> None:
    commands = [command for command in doc_commands("README.md") if is_docker_command(command)]
    assert len(commands) >= 8, commands
    for command in commands:
        result = run_doc(retarget(command, {8009: int(docker.env["VLLM_PORT"])}), docker.env, timeout_s=180)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        if command.endswith("up.sh"):
            assert "vLLM is up" in result.stdout and "KV cache" in result.stdout, command
        elif command.endswith("down.sh --volumes"):
            assert "model cache volume is removed" in result.stdout, command
        elif command.endswith("down.sh"):
            assert "stopped" in result.stdout and "volume is kept" in result.stdout, command
        else:
            argv = shlex.split(command)[1:]
            assert docker.calls()[-1]["argv"] == argv, command
            profiles = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--profile"]
            services = compose_services(*profiles)
            assert not {"up", "exec"} & set(argv) or set(argv) & services, f"{command} names no service of {services}"


def compose_services(*profiles: str) -> set[str]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    return {name for name, service in document["services"].items()
            if not service.get("profiles") or set(service["profiles"]) & set(profiles)}


def test_volumes_on_the_native_runtime_is_one_clear_error(docker: FakeDocker) -> None:
    down = docker.run("down.sh", "--volumes", RUNTIME="native")
    assert down.returncode == 2
    errors = [line for line in down.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--volumes is for RUNTIME=docker|docker-gpu" in errors[0], down.stdout + down.stderr
    assert docker.calls() == []  # the native runtime never asks docker anything
