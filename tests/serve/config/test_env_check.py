"""A name that is no setting gets one warning naming the closest setting; vLLM's own variables pass through."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from serve.config import env_check
from serve.config.settings import KNOBS, Settings
from serve.engines.native import NativeRuntime
from serve.install.vllm_venv import VENV as VLLM_VENV
from tests.conftest import ROOT, kit_env, run_script

DEFAULTS = {knob.env: knob.default for knob in KNOBS}


def test_a_near_miss_an_unrelated_key_and_a_passthrough_one_in_the_settings_file() -> None:
    lines = env_check.unknown_names(
        ["MAX_NUM_SEQ", "GREETING", "VLLM_LOGGING_LEVEL", "MAX_NUM_SEQS", "MODEL"], {}, ".env"
    )
    assert lines == [
        "MAX_NUM_SEQ (in .env) is not a setting of the kit, which ignores it; did you mean MAX_NUM_SEQS?",
        "GREETING (in .env) is not a setting of the kit, which ignores it; the settings are the keys of .env.example "
        "(serve/config/README.md)",
    ]


def test_only_shell_variables_that_look_like_the_kits_are_checked() -> None:
    shell = {
        name: "1"
        for name in (
            "PATH",
            "HOME",
            "OLLAMA_HOST",
            "OMP_PROC_BIND",
            "MAX_JOBS",
            "TORCH_HOME",
            "HF_HOME",
            "OMP_NUM_THREADS",
            "VLLM_LOGGING_LEVEL",
            "VLLM_PORT",
            "KIT_ENV_FILE",
            "ENGINE",
            "VLLM_PORTS",
            "VLLM_NO_SUCH_THING",
        )
    }
    warned = [line.split()[0] for line in env_check.unknown_names([], shell, ".env")]
    assert warned == ["ENGINE", "VLLM_NO_SUCH_THING", "VLLM_PORTS"]
    assert "did you mean VLLM_PORT?" in env_check.problem("VLLM_PORTS", "exported in the shell")
    named = env_check.problem("VLLM_NO_SUCH_THING", "exported in the shell").split(" in ")[-1].split(";")[0]
    assert named == "serve/config/vllm_env_names.txt" and (ROOT / named).is_file()  # the list it names is there


def test_up_warns_before_anything_starts(tmp_path: Path) -> None:
    """Through up.sh: the warnings come first, then the settings are checked (here a bad port stops it at once)."""
    env_file = tmp_path / "typo.env"
    env_file.write_text((ROOT / ".env.example").read_text() + "MAX_NUM_SEQ=4\nGREETING=hi\nVLLM_LOGGING_LEVEL=DEBUG\n")
    env = {**kit_env(VLLM_PORT="0", VLLM_PORTS="8011"), "KIT_ENV_FILE": str(env_file)}
    up = run_script("up.sh", env, timeout_s=300)
    lines = [line for line in up.stderr.splitlines() if line.strip()]
    assert up.returncode == 2, up.stdout + up.stderr
    assert [line.split()[:2] for line in lines] == [
        ["warning:", "MAX_NUM_SEQ"],
        ["warning:", "GREETING"],
        ["warning:", "VLLM_PORTS"],
        ["error:", "VLLM_PORT='0'"],
    ], lines
    assert "did you mean MAX_NUM_SEQS?" in lines[0] and "did you mean VLLM_PORT?" in lines[2]


def test_vllms_own_variables_in_the_settings_file_reach_the_native_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "passthrough.env"
    env_file.write_text("VLLM_LOGGING_LEVEL=DEBUG\nVLLM_PORT=8123\nMAX_NUM_SEQ=4\n")
    monkeypatch.setenv("KIT_ENV_FILE", str(env_file))
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    runtime = NativeRuntime(Settings.from_env(DEFAULTS))
    _, env = runtime.command(runtime.resolve())
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert "VLLM_PORT" not in env and "MAX_NUM_SEQ" not in env  # a setting of the kit, and no variable of vLLM
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")  # the shell wins over the file, as for every setting
    assert runtime.command(runtime.resolve())[1]["VLLM_LOGGING_LEVEL"] == "WARNING"


def test_the_committed_list_is_the_installed_vllms() -> None:
    """serve/config/vllm_env_names.txt is vllm.envs' VLLM_* names in the native runtime's vLLM (tests/run.sh
    installs it)."""
    script = (
        "import vllm.envs as e; print('\\n'.join(sorted(n for n in e.environment_variables if n.startswith('VLLM_'))))"
    )
    result = subprocess.run([str(VLLM_VENV.python), "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) == env_check.vllm_names()


def test_a_retired_setting_says_what_became_of_it() -> None:
    (line,) = env_check.unknown_names(["LLAMACPP_INTERRUPT_REQUESTS"], {}, ".env")
    assert line.startswith("LLAMACPP_INTERRUPT_REQUESTS (in .env) is a retired setting, which the kit ignores")
    assert "LLAMACPP_NUM_PARALLEL" in line and line.endswith("delete the line")
