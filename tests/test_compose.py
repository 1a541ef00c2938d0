"""compose.yaml, validated offline: the Compose Specification schema, Debian's docker-compose, and one
source of truth (the CPU service renders to the native runtime's own vLLM argv for the same settings)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from serve.config.machine import Machine, detect
from serve.config.settings import KNOBS, VLLM_VERSION, Settings
from serve.config.sizing import GiB
from serve.config.vllm_flags import FLAGS, Target, parse_version, setting_becomes, vllm_args, vllm_env, vllm_flags
from serve.engines.tracks import (
    CONTAINER_PORT,
    CPU,
    GPU,
    Track,
    compose_env,
    container_command,
    container_env,
    plan_for_container,
    target,
)
from tests.conftest import ROOT
from tests.support.docs import ENGINES_PAGE
from ui.environment import load_env

SCHEMA = Path(__file__).parent / "data" / "compose-spec" / "compose-spec.json"
COMPOSE = ROOT / "compose.yaml"
REFERENCE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
PROFILES = {"default": (), "gpu": ("gpu",), "ollama": ("ollama",), "observe": ("observe",), "webui": ("webui",)}
CUSTOM_ENV = {  # a .env far from the defaults: every value compose passes on changes
    "MODEL_NAME": "Qwen/Qwen2.5-0.5B-Instruct",
    "DTYPE": "float32",
    "MAX_MODEL_LEN": "2048",
    "MAX_NUM_SEQS": "4",
    "SWAP_SPACE": "2",
    "VLLM_CPU_KVCACHE_SPACE": "3",
    "OMP_THREADS": "3",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "OPENBLAS_NUM_THREADS": "2",
    "MKL_NUM_THREADS": "2",
    "VLLM_API_KEY": "sk-lab",
    "ENFORCE_EAGER": "true",
    "VLLM_EXTRA_ARGS": "--seed 7 --max-log-len '100'",
    "GPU_MEMORY_UTILIZATION": "0.5",
    "QUANTIZATION": "awq",
    "VLLM_PORT": "8123",
    "GPU_PORT": "8124",
}


def interpolate(node: object, env: dict[str, str]) -> object:
    """Compose's `${VAR:-default}` / `${VAR}` / `$$`, applied to every string of the parsed file."""
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env) for value in node]
    if isinstance(node, str):
        text = REFERENCE.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), node)
        return text.replace("$$", "$")
    return node


def active(document: dict, profiles: tuple[str, ...]) -> dict:
    services = {
        name: service
        for name, service in document["services"].items()
        if not service.get("profiles") or set(service["profiles"]) & set(profiles)
    }
    return {**document, "services": services}


def rendered_with_defaults(profiles: tuple[str, ...] = ("gpu", "ollama")) -> dict:
    return active(interpolate(yaml.safe_load(COMPOSE.read_text()), {}), profiles)


@pytest.mark.parametrize("profile", PROFILES)
def test_compose_validates_against_the_compose_spec_schema(profile: str) -> None:
    document = rendered_with_defaults(PROFILES[profile])
    assert "vllm-cpu" in document["services"]  # the CPU track starts by default, with every profile
    if profile != "default":
        expected = {"gpu": "vllm-gpu", "ollama": "ollama", "observe": "prometheus", "webui": "open-webui"}[profile]
        assert expected in document["services"]
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(document)


def test_the_schema_check_can_fail() -> None:
    document = rendered_with_defaults()
    document["services"]["vllm-cpu"]["cap_add"] = "SYS_NICE"  # a string where a list belongs
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(document)


def docker_compose_config(env_file: Path, env: dict[str, str], *profiles: str) -> dict:
    if shutil.which("docker-compose") is None:
        pytest.skip("Debian's docker-compose is not installed (tests/system-packages.sh installs it)")
    flags = [flag for profile in profiles for flag in ("--profile", profile)]
    result = subprocess.run(
        ["docker-compose", "--env-file", str(env_file), "-f", str(COMPOSE), *flags, "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env},
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.mark.parametrize("profile", PROFILES)
def test_docker_compose_config_accepts_the_file(profile: str, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text((ROOT / ".env.example").read_text())
    config = docker_compose_config(env_file, {}, *PROFILES[profile])
    assert "vllm-cpu" in config["services"]


def settings_for(tmp_path: Path, overrides: dict[str, str]) -> tuple[Path, Settings]:
    env_file = tmp_path / ".env"
    env_file.write_text(
        (ROOT / ".env.example").read_text() + "".join(f'{key}="{value}"\n' for key, value in overrides.items())
    )
    clean = {
        key: value
        for key, value in load_env(env_file).items()
        if key in {knob.env for knob in KNOBS} and key not in os.environ
    }
    settings = Settings.from_env(clean)
    assert shlex.join(settings.extra_args) == shlex.join(shlex.split(overrides.get("VLLM_EXTRA_ARGS", "")))
    return env_file, settings


EVERY_OPTIONAL_FLAG = {"ENFORCE_EAGER": "true", "VLLM_API_KEY": "sk-lab", "QUANTIZATION": "awq", "BLOCK_SIZE": "16"}
VARIANTS = {"defaults": {}, "custom": CUSTOM_ENV, "every-optional-flag": EVERY_OPTIONAL_FLAG}
SERVICES = {CPU: ((), "vllm-cpu"), GPU: (("gpu",), "vllm-gpu")}


def flag_pairs(argv: list[str]) -> list[tuple[str, str]]:
    """['--dtype', 'float32', '--enforce-eager', ...] -> [('--dtype', 'float32'), ('--enforce-eager', ''), ...]."""
    pairs: list[tuple[str, str]] = []
    for part in argv:
        if part.startswith("--"):
            pairs.append((part, ""))
        else:
            assert pairs and not pairs[-1][1], f"{part!r} follows no flag in {argv}"
            pairs[-1] = (pairs[-1][0], part)
    return pairs


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("track", [CPU, GPU], ids=["cpu", "gpu"])
def test_each_service_renders_the_one_mapping_flag_by_flag(track: Track, variant: str, tmp_path: Path) -> None:
    """compose.yaml's command and environment, as docker-compose renders them with what up.sh exports, are the
    mapping's (serve/config/vllm_flags.py) for the track's vLLM: each flag, in order, with its value, then
    VLLM_EXTRA_ARGS; each variable of vLLM's environment."""
    env_file, settings = settings_for(tmp_path, VARIANTS[variant])
    plan = plan_for_container(settings, detect(), track)
    profiles, service_name = SERVICES[track]
    service = docker_compose_config(env_file, compose_env(settings, plan, track), *profiles)["services"][service_name]
    expected = vllm_flags(settings, plan, target(settings, track))
    rendered = flag_pairs(shlex.split(service["command"]))
    mapped = rendered[: len(expected)]
    for index, (flag, value) in enumerate(expected):
        got = mapped[index] if index < len(mapped) else ("(nothing)", "")
        assert got == (flag.name, value), (
            f"{service_name}'s flag {index + 1} renders {got}, the mapping says {(flag.name, value)} "
            f"(setting {flag.setting}): fix compose.yaml or FLAGS"
        )
    assert rendered[len(expected) :] == flag_pairs(list(settings.extra_args))  # VLLM_EXTRA_ARGS, last, as they are
    assert shlex.split(service["command"]) == container_command(settings, plan, track)
    environment = {key: str(value) for key, value in service["environment"].items()}
    assert environment == container_env(settings, plan, track)
    published = settings.port if track is CPU else settings.gpu_port
    assert service["ports"][0].startswith(f"127.0.0.1:{published}:{CONTAINER_PORT}")


HAND_RUN_MACHINE = Machine(4, frozenset(), 5 * GiB)  # compose.yaml's fallbacks: 4 threads, no BF16 (float32)
HAND_RUN_MAX_NUM_SEQS = 16


def hand_run_command(track: Track) -> str:
    """The mapping's command line for the default settings, as compose.yaml falls back to it when run by hand."""
    settings = Settings.from_env({})
    plan = plan_for_container(settings, HAND_RUN_MACHINE, track)
    if plan.max_num_seqs is not None:
        plan = dataclasses.replace(plan, max_num_seqs=HAND_RUN_MAX_NUM_SEQS)
    return shlex.join(container_command(settings, plan, track))


@pytest.mark.parametrize("track", [CPU, GPU], ids=["cpu", "gpu"])
def test_run_by_hand_each_service_falls_back_to_the_mappings_command_line(track: Track) -> None:
    """Nothing of the command line is written by hand in compose.yaml: RESOLVED_ARGS's fallback too is the mapping's."""
    service = rendered_with_defaults()["services"][SERVICES[track][1]]
    expected = hand_run_command(track)
    fix = f"write ${{RESOLVED_ARGS:-{expected}}} in compose.yaml's {SERVICES[track][1]}"
    assert shlex.split(service["command"]) == shlex.split(expected), fix


def test_the_cpu_image_gets_its_own_vllms_flags() -> None:
    """vLLM 0.9.1 in openEuler's image: --swap-space still exists, `nobind` is spelled "all"; the GPU image's and the
    native vLLM never get --swap-space."""
    settings = Settings.from_env({"VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    plan = plan_for_container(settings, detect(), CPU)
    assert settings.cpu_image_vllm_version == (0, 9)
    assert "--swap-space" in container_command(settings, plan, CPU)
    assert container_env(settings, plan, CPU)["VLLM_CPU_OMP_THREADS_BIND"] == "all"
    gpu = plan_for_container(settings, detect(), GPU)
    assert "--swap-space" not in container_command(settings, gpu, GPU)
    native = Target("m", "127.0.0.1", 8009, parse_version(VLLM_VERSION))
    assert "--swap-space" not in vllm_args(settings, plan, native)
    assert vllm_env(settings, plan, native)["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_the_flag_check_can_fail(tmp_path: Path) -> None:
    """A service whose command drifts from the mapping is caught, flag by flag."""
    env_file, settings = settings_for(tmp_path, {})
    plan = plan_for_container(settings, detect(), CPU)
    service = docker_compose_config(env_file, compose_env(settings, plan, CPU))["services"]["vllm-cpu"]
    drifted = shlex.split(service["command"].replace("--max-model-len", "--max-seq-len"))
    assert flag_pairs(drifted) != [
        (flag.name, value) for flag, value in vllm_flags(settings, plan, target(settings, CPU))
    ]


def test_cpu_service_runs_the_way_vllm_cpu_needs() -> None:
    cpu = rendered_with_defaults()["services"]["vllm-cpu"]
    assert cpu["build"]["dockerfile"] == "Dockerfile.cpu" and "profiles" not in cpu
    assert cpu["cap_add"] == ["SYS_NICE"] and cpu["security_opt"] == ["seccomp:unconfined"]
    assert cpu["cpus"] == "4" and cpu["mem_limit"] == "5g" and cpu["shm_size"]
    assert cpu["restart"] == "unless-stopped"
    assert cpu["ports"] == ["127.0.0.1:8009:8000"]
    assert cpu["volumes"][0].startswith("model-cache:")
    assert "curl" not in cpu["healthcheck"]["test"] and "http://127.0.0.1:8000/health" in cpu["healthcheck"]["test"]


def test_gpu_and_ollama_profiles() -> None:
    services = rendered_with_defaults()["services"]
    gpu, ollama = services["vllm-gpu"], services["ollama"]
    assert gpu["profiles"] == ["gpu"] and gpu["ipc"] == "host"
    assert gpu["image"].startswith("vllm/vllm-openai:v")
    assert gpu["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    ]
    assert gpu["ports"] == ["127.0.0.1:8000:8000"]
    assert "/health" in " ".join(gpu["healthcheck"]["test"])
    assert ollama["profiles"] == ["ollama"] and ollama["image"].startswith("ollama/ollama:")
    assert ollama["ports"] == ["127.0.0.1:11434:11434"]


def test_every_compose_variable_is_a_knob_with_its_default_or_a_resolved_value() -> None:
    knobs = {knob.env: knob.default for knob in KNOBS}
    settings = Settings.from_env({})
    exported = compose_env(settings, plan_for_container(settings, detect(), CPU), CPU)
    references = REFERENCE.findall(json.dumps(yaml.safe_load(COMPOSE.read_text())))  # values, not comments
    assert references
    for name, default in references:
        assert name in exported, (
            f"${{{name}}} in compose.yaml is neither a knob nor exported by serve/engines/docker.py"
        )
        if name in knobs:
            assert default == knobs[name], f"${{{name}:-{default}}} disagrees with .env.example ({knobs[name]})"
        else:
            assert name.startswith("RESOLVED_")


def test_every_shell_script_passes_shellcheck() -> None:
    scripts = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.sh"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "patches/apply.sh" in scripts and "up.sh" in scripts
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (tests/system-packages.sh installs it)")
    result = subprocess.run(["shellcheck", "--severity=style", *scripts], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def flags_table() -> list[list[str]]:
    page = (ROOT / ENGINES_PAGE).read_text()
    section = page[page.index("## Flags\n") :]
    section = section[: section.index("\n#")]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "| flag | env var | default | why |"
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[1:]]


def unquote(cell: str) -> str:
    return "" if cell == "(empty)" else cell.strip("`")


def test_flags_table_matches_the_knobs_env_example_and_compose() -> None:
    knobs = {knob.env: knob for knob in KNOBS}
    env_example = (ROOT / ".env.example").read_text().splitlines()
    every_flag = Settings.from_env(EVERY_OPTIONAL_FLAG)
    commands = {}
    for track in (CPU, GPU):  # each service as up.sh exports for its own track
        exported = compose_env(every_flag, plan_for_container(every_flag, detect(), track), track)
        service = interpolate(yaml.safe_load(COMPOSE.read_text()), exported)["services"][SERVICES[track][1]]
        commands[track.service] = service["command"]
    rows = flags_table()
    for flag, variable, default, why in rows:
        name = unquote(variable)
        assert name in knobs, f"{name} in serve/engines/README.md's flags table is not a knob"
        assert unquote(default) == knobs[name].default, f"{name}: the table says {default}"
        assert f"{name}={knobs[name].default}" in env_example
        assert why == knobs[name].why, f"{name}: the table's why differs from serve/config/settings.py"
        for option in re.findall(r"`(--[\w-]+)", flag):
            assert option in {each.name for each in FLAGS}, f"{option} ({name}'s row) is not a flag of the mapping"
            assert any(option in command.split() for command in commands.values()), f"{option} is in no service"
        named = {*re.findall(r"`(--[\w-]+)", flag), *(f"env {var}" for var in re.findall(r"env `(\w+)`", flag))}
        missing = set(setting_becomes().get(name, [])) - named
        assert not missing, f"{name}'s row in serve/engines/README.md does not name {sorted(missing)} (vllm_flags.py)"
    in_compose = {name for name, _ in REFERENCE.findall(json.dumps(yaml.safe_load(COMPOSE.read_text())))}
    assert in_compose & set(knobs) <= {unquote(row[1]) for row in rows}, "a compose knob is missing from the table"
