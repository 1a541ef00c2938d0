"""Settings: one source, environment over .env, every bad value stopped with a line that names the fix."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from serve.config.paths import ROOT
from serve.config.settings import CLIENT_VARIABLES, ENGINE_NAMES, KNOBS, Settings
from serve.engines import runtimes
from tests.conftest import free_port, kit_env, run_script
from ui.environment import load_env
from ui.values import SettingsError

BAD_VALUES = [
    ("MAX_MODEL_LEN", "abc", "whole number"),
    ("MAX_MODEL_LEN", "0", "greater than 0"),
    ("MAX_MODEL_LEN", "-1024", "greater than 0"),
    ("MAX_MODEL_LEN", "1024.5", "whole number"),
    ("MAX_NUM_SEQS", "0", "greater than 0"),
    ("MAX_NUM_SEQS", "many", "whole number"),
    ("VLLM_CPU_KVCACHE_SPACE", "0", "greater than 0"),
    ("VLLM_CPU_KVCACHE_SPACE", "-2", "greater than 0"),
    ("VLLM_CPU_KVCACHE_SPACE", "lots", "greater than 0"),
    ("SWAP_SPACE", "-1", "0 or more"),
    ("VLLM_PORT", "0", "greater than 0"),
    ("VLLM_PORT", "70000", "between 1 and 65535"),
    ("VLLM_PORT", "http", "whole number"),
    ("RUNTIME", "podman", "native, docker, docker-gpu"),
    ("DTYPE", "int8", "float32, bfloat16, float16"),
    ("DTYPE", "fp32", "float32, bfloat16, float16"),
    ("OMP_THREADS", "0", "greater than 0"),
    ("VLLM_CPU_OMP_THREADS_BIND", "all", "nobind"),
    ("VLLM_API_KEY", "my key", "must not contain spaces"),
    ("VLLM_API_KEY", "key\twith-tab", "must not contain spaces"),
    ("ENFORCE_EAGER", "maybe", "true or false"),
    ("VLLM_EXTRA_ARGS", "--flag 'unclosed", "quote it"),
    ("VLLM_HOST", "local host", "address to bind"),
    ("REPLICAS", "0", "greater than 0"),
    ("REPLICAS", "two", "whole number"),
    ("ROUTER_POLICY", "least_loaded", "cache_aware, consistent_hash, power_of_two, round_robin, random"),
    ("ROUTER_POLICY", "prefixaware", "cache_aware"),  # production-stack's router's name, not vllm-router's
    ("KEDA_MIN_REPLICAS", "0", "greater than 0"),
    ("KEDA_MAX_REPLICAS", "-3", "greater than 0"),
    ("KEDA_QUEUE_THRESHOLD", "0", "greater than 0"),
    ("KEDA_QUEUE_THRESHOLD", "lots", "greater than 0"),
]


def defaults() -> dict[str, str]:
    return {knob.env: knob.default for knob in KNOBS}


@pytest.mark.parametrize(("name", "value", "fix"), BAD_VALUES)
def test_bad_value_names_variable_value_and_fix(name: str, value: str, fix: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({**defaults(), name: value})
    message = str(caught.value)
    assert message.startswith(f"{name}={value!r} is invalid")
    assert fix in message


def test_defaults_are_the_documented_ones() -> None:
    settings = Settings.from_env({})
    assert settings.port == 8009 and settings.host == "127.0.0.1"
    assert settings.model_name == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert settings.max_model_len == 1024
    assert settings.base_url == "http://127.0.0.1:8009"
    assert settings.replicas == 1 and settings.router_policy == "cache_aware"
    assert (settings.keda_min_replicas, settings.keda_max_replicas, settings.keda_queue_threshold) == (1, 3, 5.0)


def test_keda_max_below_min_is_refused_naming_both() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({**defaults(), "KEDA_MIN_REPLICAS": "4", "KEDA_MAX_REPLICAS": "2"})
    assert str(caught.value).startswith("KEDA_MAX_REPLICAS='2' is invalid")
    assert "KEDA_MIN_REPLICAS=4" in str(caught.value)
    equal = Settings.from_env(
        {
            **defaults(),
            "KEDA_MIN_REPLICAS": "2",
            "KEDA_MAX_REPLICAS": "2",
            "KEDA_QUEUE_THRESHOLD": "2.5",
            "REPLICAS": "3",
            "ROUTER_POLICY": "round_robin",
        }
    )
    assert (equal.keda_min_replicas, equal.keda_max_replicas, equal.keda_queue_threshold) == (2, 2, 2.5)
    assert equal.replicas == 3 and equal.router_policy == "round_robin"


def test_env_example_says_each_settings_why_as_it_is_declared() -> None:
    """Every setting and client variable is in .env.example with its default, and the comment above it begins with
    its declared why (Knob.why, ClientVariable.why) word for word, wrapped as it likes; what follows is detail."""
    lines = (ROOT / ".env.example").read_text().splitlines()
    declared = [(knob.env, knob.default, knob.why) for knob in KNOBS]
    declared += [(variable.env, variable.default, variable.why) for variable in CLIENT_VARIABLES if variable.default]
    for env, default, why in declared:
        assignment = f"{env}={default}"
        assert assignment in lines, f".env.example lacks {assignment}"
        above = list(itertools.takewhile(is_comment, reversed(lines[: lines.index(assignment)])))
        comment = " ".join(line.removeprefix("# ") for line in reversed(above))
        assert comment.startswith(why), f"{env}: .env.example says {comment[:80]!r}..., settings.py {why!r}"


def is_comment(line: str) -> bool:
    """A line of a setting's comment in .env.example (not a section's `# --- ... ---` title)."""
    return line.startswith("# ") and not line.startswith("# ---")


def test_env_example_parses_and_carries_the_client_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for knob in KNOBS:
        monkeypatch.delenv(knob.env, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("MODEL", raising=False)
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)
    env = load_env(ROOT / ".env.example")
    Settings.from_env(env)
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8009/v1"
    assert env["MODEL"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_exported_port_retargets_settings_and_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text((ROOT / ".env.example").read_text())
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("VLLM_PORT", "8010")
    env = load_env(env_file)
    assert Settings.from_env(env).port == 8010
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8010/v1"


def test_environment_wins_over_env_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("MAX_NUM_SEQS=4\nDTYPE=float32\n")
    monkeypatch.setenv("MAX_NUM_SEQS", "32")
    monkeypatch.delenv("DTYPE", raising=False)
    settings = Settings.from_env(load_env(env_file))
    assert settings.max_num_seqs == 32 and settings.dtype == "float32"


def _copy_of_the_kit(tmp_path: Path) -> Path:
    """The tracked files of the kit in a fresh folder, sharing this checkout's light-tools venv."""
    kit = tmp_path / "kit"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (kit / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, kit / name)
    (kit / ".venv").symlink_to(ROOT / ".venv")
    return kit


def test_up_creates_env_once_and_never_overwrites_it(tmp_path: Path) -> None:
    kit = _copy_of_the_kit(tmp_path)
    env = kit_env(RUNTIME="no-such-runtime")
    env.pop("KIT_ENV_FILE")
    first = subprocess.run(["bash", "up.sh"], cwd=kit, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 2
    assert "Created .env from .env.example" in first.stdout
    assert (kit / ".env").read_text() == (kit / ".env.example").read_text()
    (kit / ".env").write_text("# mine\nMAX_NUM_SEQS=3\n")
    second = subprocess.run(["bash", "up.sh"], cwd=kit, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "Created .env" not in second.stdout
    assert (kit / ".env").read_text() == "# mine\nMAX_NUM_SEQS=3\n"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_MODEL_LEN", "0"),
        ("RUNTIME", "kubernetes"),
        ("DTYPE", "int4"),
        ("VLLM_API_KEY", "two words"),
        ("VLLM_CPU_KVCACHE_SPACE", "none"),
    ],
)
def test_up_sh_stops_on_a_bad_value_with_one_line(name: str, value: str) -> None:
    result = run_script("up.sh", kit_env(**{name: value}), timeout_s=120)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]  # errors go to stderr
    assert len(errors) == 1 and f"{name}={value!r} is invalid" in errors[0], result.stdout + result.stderr


def test_up_sh_refuses_a_port_in_use_and_names_a_free_one() -> None:
    port = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = run_script("up.sh", kit_env(VLLM_PORT=str(port), RUNTIME="native"), timeout_s=300)
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr
    assert f"VLLM_PORT={port} is invalid" in message and "already in use" in message
    suggested = int(re.search(r"set VLLM_PORT=(\d+)", message).group(1))
    assert suggested != port


def test_runtime_docker_without_an_engine_says_so(tmp_path: Path) -> None:
    no_engine = f"unix://{tmp_path}/no-engine.sock"  # whether or not a Docker engine runs on this machine
    result = run_script("up.sh", kit_env(RUNTIME="docker", DOCKER_HOST=no_engine), timeout_s=120)
    assert result.returncode == 2
    assert "RUNTIME='docker'" not in result.stderr  # a valid value: the problem is the machine
    assert "needs a Docker engine" in result.stderr and "RUNTIME=native" in result.stderr


def test_every_engine_the_settings_accept_has_a_runtime_and_a_port() -> None:
    """ENGINES is validated in serve/config/settings.py and served through serve/engines/runtimes.py: the two agree."""
    settings = Settings.from_env(
        {"ENGINES": ",".join(ENGINE_NAMES), "VLLM_PORT": "8101", "LLAMACPP_PORT": "8102", "LLAMA_SERVER_PORT": "8103"}
    )
    assert list(runtimes.ENGINES) == list(ENGINE_NAMES)
    built = runtimes.for_engines(dataclasses.replace(settings, runtime="native"))
    assert [(runtime.engine, runtime.port) for runtime in built] == [
        ("vllm", 8101),
        ("llamacpp", 8102),
        ("llamaserver", 8103),
    ]
    assert [runtimes.ENGINES[engine].port(settings) for engine in ENGINE_NAMES] == [8101, 8102, 8103]


def test_the_registry_holds_exactly_the_engines_a_port_setting_serves() -> None:
    """ENGINES' names come from the port settings (serves=...): a registry without one of them fails at import."""
    assert ENGINE_NAMES == ("vllm", "llamacpp", "llamaserver")
    with pytest.raises(TypeError, match="serves=NAME"):
        runtimes.registry(runtimes.VLLM)


def test_what_the_kit_needs_of_python_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the kit needs of python-dotenv (pinned in pyproject.toml): the shell wins over the file, in a value and
    inside a `${VAR:-default}` reference; a default fills in for an unset variable; quotes and comments go."""
    env_file = tmp_path / ".env"
    env_file.write_text(
        "VLLM_PORT=8009\n"
        "OPENAI_BASE_URL=http://127.0.0.1:${VLLM_PORT:-8009}/v1\n"
        "MODEL=${NO_SUCH_VARIABLE:-fallback}\n"
        'QUOTED="two words"  # a comment\n'
    )
    monkeypatch.setenv("VLLM_PORT", "8010")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("MODEL", raising=False)
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)
    env = load_env(env_file)
    assert env["VLLM_PORT"] == "8010" and env["OPENAI_BASE_URL"] == "http://127.0.0.1:8010/v1"
    assert env["MODEL"] == "fallback" and env["QUOTED"] == "two words"
