"""The Docker tracks' control paths and faults, on a real Docker engine (started by the harness if none answers):
which Compose drives it, RUNTIME=auto, a build or pull that fails, a container that dies at start, the CPU cap,
the memory a capped container sees. The CPU track served end to end is tests/serve/engines/test_docker_cpu.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from serve import __main__ as serve_main
from serve.config.machine import detect
from serve.config.settings import Settings
from serve.engines.compose import Compose, ComposeUnavailable, find, project_name
from serve.engines.docker import CPU, DockerRuntime, compose_env, plan_for_container
from serve.processes import process
from tests.conftest import ROOT, free_port, kit_env, run_bounded, run_script
from tests.support.docker.engine import DockerDaemon
from tests.support.docs import ENGINES_PAGE, doc_commands

ABSENT_REPOSITORY = "vllm-lab-kit/no-such-image"  # on no registry and not built here: pulling it always fails


def created_containers() -> set[str]:
    """Containers created and never started: what a failed step of Docker's classic builder leaves behind."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "status=created"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return set(out.split())


def project_containers(project: str | None = None) -> list[str]:
    """The containers, running or not, of a compose project (default: this checkout's)."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project or project_name()}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return out.split()


def up_fails_on_the_absent_image_and_down_leaves_nothing(
    up: list[str], down: list[str], env: dict[str, str], project: str
) -> None:
    """`up` fails with compose's own words naming the image no registry has; `down` (then the volumes `up` created)
    leaves no container of the project."""
    try:
        started = run_bounded(up, env, 300)
        assert started.returncode != 0 and ABSENT_REPOSITORY in started.stdout + started.stderr, (
            started.stdout + started.stderr
        )
    finally:
        stopped = run_bounded(down, env, 300)
        run_bounded([*down, "--volumes"], env, 300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert project_containers(project) == []


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def write_tool(folder: Path, name: str, script: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"#!/bin/sh\n{script}\n")
    (folder / name).chmod(0o755)


# --- Which Compose: the real one here, and the choices the machine cannot show (fake executables on PATH) ---


def test_the_compose_found_here_answers(docker_engine: DockerDaemon) -> None:
    compose = find("docker")
    result = subprocess.run([*compose.argv, "version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and compose.version in result.stdout


@pytest.mark.parametrize(
    ("plugin", "standalone", "expected"),
    [
        ("echo 'Docker Compose version v2.29.7'", "echo 'docker-compose version 1.29.2, build x'", "plugin 2.29.7"),
        (
            "echo \"docker: 'compose' is not a docker command.\" >&2; exit 1",
            "echo 'docker-compose version 1.29.2, build x'",
            "standalone 1.29.2",
        ),
        ("exit 1", "echo 'docker-compose version 1.25.0, build x'", "1.25.0: the kit needs 1.28 or newer"),
        ("exit 1", None, "docker-compose is not installed"),
    ],
    ids=["v2-preferred", "v1-fallback", "v1-too-old", "none"],
)
def test_compose_v2_is_preferred_then_docker_compose_1_28(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin: str, standalone: str | None, expected: str
) -> None:
    bin_dir = tmp_path / "bin"
    write_tool(bin_dir, "docker", f'[ "$1" = compose ] && {{ {plugin}; }}')
    if standalone is not None:
        write_tool(bin_dir, "docker-compose", standalone)
    monkeypatch.setenv("PATH", str(bin_dir))
    if expected.startswith(("plugin", "standalone")):
        kind, version = expected.split()
        compose = find(str(bin_dir / "docker"))
        assert compose.version == version
        assert compose.argv == (
            (str(bin_dir / "docker"), "compose") if kind == "plugin" else (str(bin_dir / "docker-compose"),)
        )
    else:
        with pytest.raises(ComposeUnavailable, match=expected):
            find(str(bin_dir / "docker"))


def test_two_clones_in_folders_with_the_same_name_get_their_own_project(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "vllm-lab-kit", tmp_path / "b" / "vllm-lab-kit"
    assert project_name(first) != project_name(second)
    # the folder's name and its resolved path: the same clone reached another way is the same project
    assert re.fullmatch(r"vllm-lab-kit-[0-9a-f]{8}", project_name(first))
    assert project_name(first) == project_name(first / ".." / first.name)


def test_swap_space_reaches_compose_only_below_vllm_0_18() -> None:
    for tag, expected in (("0.9.1-oe2403lts", "--swap-space 4"), ("0.32.0-standin", "")):
        settings = Settings.from_env({"CPU_IMAGE_TAG": tag})
        exported = compose_env(settings, plan_for_container(settings, detect(), CPU), CPU)
        assert exported["RESOLVED_SWAP_SPACE_ARGS"] == expected, tag


def test_a_tag_in_cpu_base_image_wins_over_cpu_image_tag() -> None:
    settings = Settings.from_env({"CPU_BASE_IMAGE": "localhost:5000/kit/standin:0.32.0-standin"})
    assert (settings.cpu_base_image, settings.cpu_image_tag) == ("localhost:5000/kit/standin", "0.32.0-standin")
    plain = Settings.from_env({"CPU_BASE_IMAGE": "localhost:5000/kit/standin"})
    assert (plain.cpu_base_image, plain.cpu_image_tag) == ("localhost:5000/kit/standin", "0.9.1-oe2403lts")


def test_the_recap_says_why_auto_picked_its_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    why = "a Docker engine answers `docker info` and docker-compose 1.29.2 is installed"
    docker = tmp_path / "docker"  # an engine with 4 CPUs, as `docker info --format {{.NCPU}}` reports them
    docker.write_text("#!/bin/sh\necho 4\n")
    docker.chmod(0o755)
    settings = Settings.from_env({})
    shown = DockerRuntime(settings, CPU, Compose(("docker-compose",), "1.29.2"), docker=str(docker))
    shown.picked_because = why
    serve_main.recap(settings, shown, None)
    assert f"runtime docker (RUNTIME=auto: {why})" in " ".join(capsys.readouterr().out.split())  # rich wraps it


# --- The real engine ---


def test_auto_picks_docker_and_a_failing_build_surfaces_its_error(docker_engine: DockerDaemon) -> None:
    """The base image no registry has: compose's own words, then one last line naming both ways out."""
    env = kit_env(RUNTIME="auto", VLLM_PORT=str(free_port()), CPU_BASE_IMAGE=ABSENT_REPOSITORY)
    up = run_script("up.sh", env, timeout_s=300)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "(runtime docker)" in up.stdout  # an engine and a Compose answer: auto picks Docker, and says why
    assert f"RUNTIME=auto picked docker: a Docker engine answers `docker info` and {find('docker').label}" in up.stdout
    assert "Building the patched CPU image" in up.stdout and len(errors(up.stderr)) == 1  # errors: stderr
    assert ABSENT_REPOSITORY in up.stdout + up.stderr  # compose's own words name the image it could not get
    last = up.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{ABSENT_REPOSITORY}:0.9.1-oe2403lts could not be fetched"), up.stderr
    assert "`RUNTIME=native bash up.sh` serves without Docker" in last and "set CPU_BASE_IMAGE to" in last
    assert project_containers() == []


def test_a_build_that_fails_after_its_base_image_names_no_image_way_out(
    docker_engine: DockerDaemon, tmp_path: Path
) -> None:
    """A build step failing on a base the engine holds is not an unreachable image: no way-out line then."""
    base = "vllm-lab-kit/failing-base:0.32.0-test"
    (tmp_path / "marker").write_text("an image with one file and no shell\n")
    archive = subprocess.run(["tar", "-c", "-C", str(tmp_path), "marker"], capture_output=True, check=True).stdout
    imported = subprocess.run(["docker", "import", "-", base], input=archive, capture_output=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    created_before = created_containers()
    try:
        env = kit_env(RUNTIME="docker", VLLM_PORT=str(free_port()), CPU_BASE_IMAGE=base)
        up = run_script("up.sh", env, timeout_s=300)  # Dockerfile.cpu's first RUN finds no shell there
    finally:
        subprocess.run(["docker", "image", "rm", "-f", base], capture_output=True, timeout=60)
    assert up.returncode == 1 and len(errors(up.stderr)) == 1, up.stdout + up.stderr
    assert "could not be fetched" not in up.stderr and "RUNTIME=auto picked" not in up.stdout
    assert project_containers() == []
    assert created_containers() - created_before == set()  # the failed step's container is removed (--force-rm)


def test_a_failing_gpu_pull_surfaces_its_error_and_starts_nothing(docker_engine: DockerDaemon) -> None:
    env = kit_env(RUNTIME="docker-gpu", GPU_PORT=str(free_port()), GPU_IMAGE=f"{ABSENT_REPOSITORY}:v0.11.0")
    up = run_script("up.sh", env, timeout_s=300)
    assert up.returncode == 1, up.stdout + up.stderr
    assert f"Pulling {ABSENT_REPOSITORY}:v0.11.0" in up.stdout and len(errors(up.stderr)) == 1
    assert "RUNTIME=native bash up.sh" in up.stderr.strip().splitlines()[-1] and "set GPU_IMAGE to" in up.stderr
    assert project_containers() == []
    down = run_script("down.sh", env, timeout_s=120)
    assert down.returncode == 0 and "Nothing to stop" in down.stdout


def test_a_container_that_dies_at_start_shows_its_log_and_is_removed(
    docker_engine: DockerDaemon, standin_image: str
) -> None:
    engine_cpus = int(
        subprocess.run(
            ["docker", "info", "--format", "{{.NCPU}}"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    )
    port = free_port()
    env = kit_env(
        RUNTIME="docker",
        VLLM_PORT=str(port),
        CPU_BASE_IMAGE=standin_image,
        CPU_LIMIT=str(engine_cpus + 2),  # more than the engine has: capped, else it refuses the container
        VLLM_EXTRA_ARGS="--no-such-flag",
    )
    up = run_script("up.sh", env, timeout_s=600)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "the server exited during start" in up.stderr
    assert "--no-such-flag" in up.stderr  # vLLM's own last words, from the container's log
    assert "Range of CPUs" not in up.stdout + up.stderr
    assert project_containers() == [] and process.port_is_free("127.0.0.1", port)


def test_auto_sizing_in_a_memory_capped_container_sees_the_cap(docker_engine: DockerDaemon, standin_image: str) -> None:
    cap_bytes = 1024**3
    script = "import json; from serve.config.machine import detect; print(json.dumps(detect().memory_available_bytes))"
    result = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--memory",
            str(cap_bytes),
            "-v",
            f"{ROOT / 'serve'}:/kit/serve:ro",
            "-w",
            "/kit",
            "--entrypoint",
            "python3",
            standin_image,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert 0 < seen <= cap_bytes, f"the container sees {seen} bytes available under a {cap_bytes}-byte cap"


def test_the_documented_ollama_commands_select_the_profile_here(docker_engine: DockerDaemon) -> None:
    """serve/engines/README.md's Ollama commands with the Compose found here (v1 reads the same arguments as
    `docker compose`), in a project of their own, on an image no registry has: the profile's service is
    selected, published on 127.0.0.1:11434, fails with compose's own words naming the image, and `down`
    leaves nothing."""
    compose = find("docker")
    commands = [
        command for command in doc_commands(ENGINES_PAGE) if command.startswith("docker compose --profile ollama")
    ]
    assert [command.split()[4] for command in commands] == ["up", "exec", "down"], commands
    project = f"{project_name()}-readme-ollama"
    env = {**kit_env(OLLAMA_IMAGE=f"{ABSENT_REPOSITORY}:0.12.3"), "COMPOSE_PROJECT_NAME": project}
    as_here = [[*compose.argv, *command.split()[2:]] for command in commands]
    config = subprocess.run([*as_here[0][:-3], "config"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert config.returncode == 0 and "127.0.0.1:11434:11434" in config.stdout.replace('"', ""), config.stderr
    up_fails_on_the_absent_image_and_down_leaves_nothing(as_here[0], as_here[2], env, project)


def test_a_key_guards_every_model_route_in_the_container(docker_engine: DockerDaemon, standin_image: str) -> None:
    """vLLM guards /v1 only; in the image the kit's middleware (copied in by Dockerfile.cpu) guards the rest."""
    port, key = free_port(), "container-test-key"
    env = kit_env(
        RUNTIME="docker", VLLM_PORT=str(port), CPU_BASE_IMAGE=standin_image, VLLM_API_KEY=key, ENFORCE_EAGER="true"
    )
    base = f"http://127.0.0.1:{port}"
    body = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "prompt": "The capital of France is", "max_tokens": 4}
    try:
        up = run_script("up.sh", env, timeout_s=900)
        assert up.returncode == 0, up.stdout + up.stderr
        for path in ("/invocations", "/tokenize", "/v1/completions"):
            assert httpx.post(f"{base}{path}", json=body, timeout=60).status_code == 401, path
        keyed = httpx.post(f"{base}/invocations", json=body, timeout=120, headers={"Authorization": f"Bearer {key}"})
        assert keyed.status_code == 200, keyed.text
        assert httpx.get(f"{base}/health", timeout=10).status_code == 200
    finally:
        down = run_script("down.sh", env, timeout_s=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert project_containers() == []


def test_the_documented_observe_commands_select_the_profile_here(docker_engine: DockerDaemon) -> None:
    """labs/observe.md's Docker commands with the Compose found here, in a project of their own, on images no registry
    has: the configuration is written first, the profile selects Prometheus and Grafana on the host's network,
    `up` fails with compose's own words naming an image, and `down` leaves nothing."""
    compose = find("docker")
    commands = [command for command in doc_commands("labs/observe.md") if command.startswith("docker compose")]
    assert [command.split()[4] for command in commands] == ["up", "down"], commands
    project = f"{project_name()}-observe"
    env = {
        **kit_env(PROMETHEUS_IMAGE=f"{ABSENT_REPOSITORY}:prometheus", GRAFANA_IMAGE=f"{ABSENT_REPOSITORY}:grafana"),
        "COMPOSE_PROJECT_NAME": project,
    }
    written = run_bounded([str(ROOT / ".venv" / "bin" / "python"), "-m", "serve.observe"], env, 60)
    assert written.returncode == 0, written.stderr
    as_here = [[*compose.argv, *command.split()[2:]] for command in commands]
    config = subprocess.run([*as_here[0][:-4], "config"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert config.returncode == 0, config.stderr
    services = yaml.safe_load(config.stdout)["services"]
    assert {"prometheus", "grafana"} <= set(services)
    assert all(services[name]["network_mode"] == "host" for name in ("prometheus", "grafana")), config.stdout
    up_fails_on_the_absent_image_and_down_leaves_nothing(as_here[0], as_here[1], env, project)


def test_the_documented_webui_commands_select_the_profile_here(docker_engine: DockerDaemon) -> None:
    """labs/webui.md's Docker commands with the Compose found here, in a project of their own, on an image no
    registry has: the profile selects Open WebUI on the host's network listening on 127.0.0.1, `up` fails with
    compose's own words naming the image, and `down` leaves nothing."""
    compose = find("docker")
    commands = [command for command in doc_commands("labs/webui.md") if command.startswith("docker compose")]
    assert [command.split()[4] for command in commands] == ["up", "down"], commands
    project = f"{project_name()}-webui"
    env = {**kit_env(OPEN_WEBUI_IMAGE=f"{ABSENT_REPOSITORY}:open-webui"), "COMPOSE_PROJECT_NAME": project}
    as_here = [[*compose.argv, *command.split()[2:]] for command in commands]
    config = subprocess.run([*as_here[0][:-3], "config"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert config.returncode == 0, config.stderr
    service = yaml.safe_load(config.stdout)["services"]["open-webui"]
    assert service["network_mode"] == "host" and service["environment"]["HOST"] == "127.0.0.1", config.stdout
    up_fails_on_the_absent_image_and_down_leaves_nothing(as_here[0], as_here[1], env, project)
