"""Second-day hardening: bad addresses and flags get one line, the key goes where it belongs, exposure is loud."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from benchmarks.fresh_machine import fresh_clone
from client.keys import api_key_for, refused_key_hint
from serve import __main__ as serve_main
from serve.config.settings import KNOBS, Settings
from serve.engines.native import NativeRuntime
from serve.processes.local_server import LocalServer
from tests.conftest import ROOT, free_port, kit_env, run_bounded
from ui.values import SettingsError

DEFAULTS = {knob.env: knob.default for knob in KNOBS}
NOT_HERE = "203.0.113.7"  # TEST-NET-3: documentation only, never an address of this machine


def settings(**overrides: str) -> Settings:
    return Settings.from_env({**DEFAULTS, **overrides})


@pytest.mark.parametrize(
    ("raw", "fix"),
    [
        ("localhost:8009", "set VLLM_HOST=localhost and VLLM_PORT=8009"),
        ("127.0.0.1:9000", "set VLLM_HOST=127.0.0.1 and VLLM_PORT=9000"),
        ("a..b", "use an IP address"),
    ],
)
def test_vllm_host_with_a_port_or_malformed_is_one_line(raw: str, fix: str) -> None:
    with pytest.raises(SettingsError, match=fix):
        settings(VLLM_HOST=raw)


def test_ipv6_hosts_get_bracketed_urls() -> None:
    assert settings(VLLM_HOST="::1").base_url == "http://[::1]:8009"
    assert settings(VLLM_HOST="[::1]").host == "::1"
    assert settings(VLLM_HOST="0.0.0.0").base_url == "http://127.0.0.1:8009"


@pytest.mark.parametrize(
    ("extra", "setting"),
    [
        ("--port 9000", "VLLM_PORT"),
        ("--host=0.0.0.0", "VLLM_HOST"),
        ("--max-num-batched-tokens 512 --api-key s3cret", "VLLM_API_KEY"),
    ],
)
def test_extra_args_may_not_override_the_kits_own_flags(extra: str, setting: str) -> None:
    with pytest.raises(SettingsError, match=f"set {setting} instead"):
        settings(VLLM_EXTRA_ARGS=extra)
    assert settings(VLLM_EXTRA_ARGS="--max-num-batched-tokens 512").extra_args == ("--max-num-batched-tokens", "512")


def test_an_address_not_on_this_machine_is_one_line_not_a_traceback() -> None:
    server = LocalServer("vLLM", "vllm", "x", NOT_HERE, free_port(), "VLLM_PORT", "http://unused")
    with pytest.raises(SettingsError, match=f"VLLM_HOST={NOT_HERE} is invalid: this machine cannot listen there"):
        server.ensure_port_free()


def test_up_refuses_an_address_not_on_this_machine_in_one_line() -> None:
    port = free_port()
    result = run_bounded(["bash", "up.sh"], kit_env(VLLM_HOST=NOT_HERE, VLLM_PORT=str(port), RUNTIME="native"), 120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        line for line in result.stderr.splitlines() if line.strip()
    ], result.stderr
    assert f"VLLM_HOST={NOT_HERE} is invalid" in result.stderr


def test_the_kits_key_goes_to_the_kits_engines_and_an_openai_key_elsewhere() -> None:
    env = {"VLLM_API_KEY": "kit", "OPENAI_API_KEY": "sk-openai", "VLLM_PORT": "8009", "LLAMACPP_PORT": "11434"}
    assert api_key_for("http://127.0.0.1:8009/v1", env) == ("kit", "VLLM_API_KEY")
    assert api_key_for("http://localhost:11434/v1", env) == ("kit", "VLLM_API_KEY")
    assert api_key_for("https://api.example.com/v1", env) == ("sk-openai", "OPENAI_API_KEY")
    assert api_key_for("http://127.0.0.1:8009/v1", {"OPENAI_API_KEY": "sk-openai"}) == ("sk-openai", "OPENAI_API_KEY")
    assert api_key_for("http://127.0.0.1:8009/v1", {}) == (None, "")
    hint = refused_key_hint("http://127.0.0.1:8009/v1", "VLLM_API_KEY")
    assert "the key from VLLM_API_KEY was sent" in hint and "OPENAI_API_KEY" in hint
    assert "no key was sent" in refused_key_hint("http://x/v1", "")


def test_the_engine_never_inherits_the_kits_vllm_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM reads VLLM_PORT as its internal ports' base: `VLLM_PORT=8010 bash up.sh` must not hand it over."""
    monkeypatch.setenv("VLLM_PORT", "8010")
    runtime = NativeRuntime(settings(VLLM_PORT="8010"))
    argv, env = runtime.command(runtime.resolve())
    assert "VLLM_PORT" not in env
    assert argv[argv.index("--port") + 1] == "8010"


def test_exposure_without_a_key_is_loud_and_names_the_real_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = NativeRuntime(settings(VLLM_HOST="0.0.0.0"))
    serve_main.recap(shown.settings, shown, None)
    out, err = capsys.readouterr()
    assert "listening on 0.0.0.0, port 8009" in out
    assert "warning: vLLM listens on 0.0.0.0 (VLLM_HOST), beyond this machine, with no API key" in err
    serve_main.recap(settings(VLLM_HOST="0.0.0.0", VLLM_API_KEY="k"), shown, None)
    serve_main.recap(settings(), shown, None)
    out, err = capsys.readouterr()
    assert err == "" and out.count("listening on") == 1  # the exposed one with a key still names its address


def test_a_key_in_a_world_readable_settings_file_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / ".env"
    env.write_text("VLLM_PORT=8009\nVLLM_API_KEY=s3cret\n")
    env.chmod(0o644)
    serve_main.warn_if_key_file_readable(env)
    assert f"{env} holds VLLM_API_KEY and every local user can read it: chmod 600" in capsys.readouterr().err
    env.chmod(0o600)
    serve_main.warn_if_key_file_readable(env)
    env.chmod(0o644)
    env.write_text("VLLM_API_KEY=\n")
    serve_main.warn_if_key_file_readable(env)
    assert capsys.readouterr().err == ""


def test_up_writes_env_readable_by_its_owner_alone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    (clone / ".venv").symlink_to(ROOT / ".venv")  # the light tools are not what this test is about
    env = kit_env(VLLM_PORT="0")  # a bad value: up.sh stops right after writing .env
    del env["KIT_ENV_FILE"]
    result = run_bounded(["bash", "up.sh"], env, 60, cwd=clone)
    assert result.returncode == 2 and "VLLM_PORT='0' is invalid" in result.stderr, result.stdout + result.stderr
    assert stat.S_IMODE((clone / ".env").stat().st_mode) == 0o600
    assert os.access(clone / ".env", os.R_OK)


def test_the_engine_middleware_requires_the_key_on_every_route_but_probes_and_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "serve" / "engine_plugins"))
    monkeypatch.setenv("VLLM_API_KEY", "k")
    sys.modules.pop("kit_auth", None)
    import kit_auth

    async def answer(path: str, authorization: str | None = None) -> list[dict]:
        sent: list[dict] = []

        async def app(scope: dict, receive: object, send: object) -> None:
            sent.append({"type": "http.response.start", "status": 200})

        async def send(message: dict) -> None:
            sent.append(message)

        headers = [(b"authorization", authorization.encode())] if authorization else []
        await kit_auth.RequireKeyEverywhere(app)(
            {"type": "http", "method": "POST", "path": path, "headers": headers}, None, send
        )
        return sent

    async def status(path: str, authorization: str | None = None) -> int:
        return (await answer(path, authorization))[0]["status"]

    for path in ("/invocations", "/tokenize", "/v1/completions", "/detokenize", "/pooling"):
        assert asyncio.run(status(path)) == 401, path
        assert asyncio.run(status(path, "Bearer wrong")) == 401, path
        assert asyncio.run(status(path, "Bearer k")) == 200, path
    for path in ("/health", "/ping", "/metrics", "/version"):
        assert asyncio.run(status(path)) == 200, path
    # the body the OpenAI SDK reads its AuthenticationError from: an error object, not a string
    start, body = asyncio.run(answer("/v1/chat/completions", "Bearer wrong"))
    error = json.loads(body["body"])["error"]
    assert set(error) == {"message", "type", "param", "code"} and "VLLM_API_KEY" in error["message"]
    assert dict(start["headers"])[b"content-length"] == str(len(body["body"])).encode()


def test_model_path_must_be_a_model_folder(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="no config.json there"):
        settings(MODEL_PATH=str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert settings(MODEL_PATH=str(tmp_path)).model_path == str(tmp_path.resolve())
