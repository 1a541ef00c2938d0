"""Open WebUI on the kit's engines: its configuration from the settings (connections, offline, private), compose's
`webui` service held to the same, and the real thing: labs/webui.md's commands, verbatim, start PyPI's open-webui
beside the harness's real vLLM, and Debian's headless Chromium, driven by Playwright, chats with vLLM through it."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import httpx
import pytest
import yaml

from serve.config.paths import ROOT
from serve.config.settings import KNOBS, OPEN_WEBUI_VERSION, Settings
from serve.install import open_webui_venv, system
from serve.install.venv import Venv
from serve.processes import process
from serve.processes.metrics import scrape
from serve.webui import open_webui
from tests.conftest import MODEL, Server, free_port
from tests.support.docs import doc_commands, retarget, run_doc
from tests.support.ollama_standin import ollama_standin
from tests.support.waiting import wait_until
from ui.values import SettingsError

DEFAULTS = {knob.env: knob.default for knob in KNOBS}
PAGE = "labs/webui.md"
PROMPT = "Say OK."
TIME_TOOL = "get_current_timestamp"  # one of Open WebUI's built-in tools the kit leaves on: it runs offline
INSTALL_AND_START_TIMEOUT_S = 1800  # a first install downloads ~90 packages; the first start creates the database


def settings(**overrides: str) -> Settings:
    return Settings.from_env({**DEFAULTS, **overrides})


def test_it_talks_to_each_engine_in_engines_at_its_v1_with_the_kits_key() -> None:
    env = open_webui.OpenWebUIRuntime(settings()).environment(None)
    assert env["OPENAI_API_BASE_URLS"] == "http://127.0.0.1:8009/v1" and env["OPENAI_API_KEYS"] == ""
    assert env["DEFAULT_MODELS"] == MODEL and env["ENABLE_OLLAMA_API"] == "False"
    keyed = settings(ENGINES="vllm,llamacpp,llamaserver", VLLM_API_KEY="sk-lab", REPLICAS="2")
    env = open_webui.OpenWebUIRuntime(keyed).environment(None)
    # the router answers on VLLM_PORT in front of the replicas; llama.cpp's two servers on their own ports
    assert env["OPENAI_API_BASE_URLS"].split(";") == [
        "http://127.0.0.1:8009/v1",
        "http://127.0.0.1:11434/v1",
        "http://127.0.0.1:8089/v1",
    ]
    assert env["OPENAI_API_KEYS"].split(";") == ["sk-lab"] * 3
    gpu = open_webui.OpenWebUIRuntime(settings(RUNTIME="docker-gpu")).environment(None)
    assert gpu["OPENAI_API_BASE_URLS"] == "http://127.0.0.1:8000/v1"  # GPU_PORT
    assert Path(env["DATA_DIR"]).is_relative_to(ROOT / ".kit")


def test_it_runs_offline_private_and_configured_by_the_environment_alone() -> None:
    env = open_webui.OpenWebUIRuntime(settings()).environment(None)
    for name, value in {
        "OFFLINE_MODE": "true",
        "DO_NOT_TRACK": "true",
        "SCARF_NO_ANALYTICS": "true",
        "ANONYMIZED_TELEMETRY": "false",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "ENABLE_PERSISTENT_CONFIG": "False",
        "WEBUI_AUTH": "False",
    }.items():
        assert env[name] == value, name
    runtime = open_webui.OpenWebUIRuntime(settings(VLLM_HOST="0.0.0.0", OPEN_WEBUI_PORT="3999"))
    assert runtime.server.host == "127.0.0.1" and runtime.base_url == "http://127.0.0.1:3999"  # whatever VLLM_HOST


def test_its_built_in_tools_go_to_an_engine_that_serves_tool_calls_the_time_ones_only() -> None:
    """The kit's vLLM serves tool calls: Open WebUI's time tools on (all of them overflow a 1024-token context);
    with TOOL_CALL_PARSER=none none are sent (vLLM would answer each chat with a 400)."""
    metadata = json.loads(open_webui.OpenWebUIRuntime(settings()).environment(None)["DEFAULT_MODEL_METADATA"])
    assert metadata["builtinTools"]["time"] is True and "capabilities" not in metadata
    assert set(metadata["builtinTools"]) == {"time", *open_webui.OTHER_BUILTIN_TOOLS}
    assert not any(metadata["builtinTools"][name] for name in open_webui.OTHER_BUILTIN_TOOLS)
    off = open_webui.OpenWebUIRuntime(settings(TOOL_CALL_PARSER="none")).environment(None)
    assert json.loads(off["DEFAULT_MODEL_METADATA"]) == {"capabilities": {"builtin_tools": False}}


def test_the_learners_ollama_becomes_a_connection_when_one_answers() -> None:
    port = free_port()
    runtime = open_webui.OpenWebUIRuntime(settings(LLAMACPP_PORT=str(port)))
    with ollama_standin(port) as url:
        found = runtime.find_ollama()
        assert found is not None and found.base_url == url
        env = runtime.environment(found)
    assert env["ENABLE_OLLAMA_API"] == "True" and env["OLLAMA_BASE_URLS"] == url
    assert env["OPENAI_API_BASE_URLS"] == "http://127.0.0.1:8009/v1"  # the kit's engines stay


def test_a_taken_port_is_refused_before_any_engine_starts_naming_the_setting_and_a_free_one() -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(SettingsError) as caught:
            open_webui.wanted(settings(OPEN_WEBUI="true", OPEN_WEBUI_PORT=str(port)))
    assert str(caught.value).startswith(f"OPEN_WEBUI_PORT={port} is invalid: port {port} on 127.0.0.1 is already")
    assert "an Open WebUI of your own?" in str(caught.value) and "(free now)" in str(caught.value)
    assert open_webui.wanted(settings()) is None  # OPEN_WEBUI=false asks for nothing


@pytest.mark.parametrize(("version", "refused"), [("3 12", False), ("3 13", True)])
def test_a_python_open_webui_does_not_run_on_is_refused_before_its_first_install(
    version: str, refused: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """open-webui 0.12.4 requires Python <3.13 and the kit makes its venvs with `python3`: a machine whose python3 is
    3.13 hears so before any engine starts (a python3 on PATH that says which version it is stands in for one)."""
    monkeypatch.setattr(open_webui_venv, "VENV", Venv(tmp_path / "open-webui", "Open WebUI", ("x",), tmp_path / "log"))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text(f"#!/bin/sh\necho {version}\n")
    (tmp_path / "bin" / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    if not refused:
        assert open_webui_venv.python_problem() is None
        return
    with pytest.raises(system.MissingTools) as caught:
        open_webui.wanted(settings(OPEN_WEBUI="true", OPEN_WEBUI_PORT=str(free_port())))
    assert str(caught.value).startswith(
        f"open-webui=={OPEN_WEBUI_VERSION} runs on Python 3.11 or 3.12 (its Requires-Python), and this machine's "
        "python3 is 3.13"
    ), caught.value


def webui_service() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["open-webui"]


def test_the_compose_service_is_pinned_to_the_native_version_and_configured_as_the_native_one() -> None:
    """One configuration, two renderings: every variable the native runtime fixes has the same value in compose,
    the connection is vLLM's published /v1 with the kit's key, and the image is the pip pin's version."""
    service = webui_service()
    assert service["profiles"] == ["webui"] and service["network_mode"] == "host"
    assert service["image"] == f"${{OPEN_WEBUI_IMAGE:-ghcr.io/open-webui/open-webui:v{OPEN_WEBUI_VERSION}}}"
    assert settings().open_webui_image.endswith(f":v{OPEN_WEBUI_VERSION}")
    assert f"open-webui=={OPEN_WEBUI_VERSION}" == open_webui_venv.REQUIREMENT
    environment = {key: str(value) for key, value in service["environment"].items()}
    for name, value in open_webui.FIXED_ENV.items():
        assert environment.get(name) == value, f"compose's {name}={environment.get(name)}, the native one's {value}"
    assert environment["DEFAULT_MODEL_METADATA"] == open_webui.BUILTIN_TOOLS_OFF  # the CPU image serves no tools
    assert environment["HOST"] == "127.0.0.1" and environment["PORT"] == "${OPEN_WEBUI_PORT:-3010}"
    assert environment["OPENAI_API_BASE_URL"] == "http://127.0.0.1:${VLLM_PORT:-8009}/v1"
    assert environment["OPENAI_API_KEY"] == "${VLLM_API_KEY:-}"
    assert environment["DEFAULT_MODELS"] == f"${{MODEL_NAME:-{MODEL}}}"
    assert service["volumes"] == ["open-webui-data:/app/backend/data"]


def page_commands() -> tuple[str, str, str]:
    up, version, down = [command for command in doc_commands(PAGE) if not command.startswith("docker ")]
    assert (up, down) == ("OPEN_WEBUI=true bash up.sh", "bash down.sh"), (up, down)
    return up, version, down


def signed_in(base_url: str) -> dict[str, str]:
    """The header the page's own no-login session uses (WEBUI_AUTH=False: Open WebUI's one local user)."""
    response = httpx.post(
        f"{base_url}/api/v1/auths/signin", json={"email": "admin@localhost", "password": ""}, timeout=30
    )
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


@pytest.mark.slow
def test_the_page_starts_open_webui_and_a_browser_chats_with_the_kits_vllm(vllm_server: Server) -> None:
    """labs/webui.md's commands, verbatim, beside the harness's vLLM (left running as it is) and a stand-in of the
    learner's Ollama: `OPEN_WEBUI=true bash up.sh` installs Open WebUI if needed and starts it; its API lists the
    kit's model and the Ollama's; headless Chromium opens the page, sends "Say OK." and reads the answer as it
    streams in (Open WebUI's time tools sent with it): vLLM's /metrics counts the request; then a chat in which the
    model's settings name a time tool: Open WebUI runs it and the page shows its result; down.sh (run with ENGINES
    naming no engine of the session's) stops Open WebUI and frees its port."""
    # Playwright: the test extra, imported where it is used
    from tests.support.open_webui_browser import chat, tool_result

    up, version, down_command = page_commands()
    port, ollama_port = free_port(), free_port()
    env = {
        **vllm_server.env,
        "OPEN_WEBUI_PORT": str(port),
        "LLAMACPP_PORT": str(ollama_port),
        "DEFAULT_MODEL_PARAMS": json.dumps({"temperature": 0}),
        "CHAT_RESPONSE_MAX_TOOL_CALL_ITERATIONS": "1",
    }
    ports = {8009: vllm_server.port, 3010: port}
    base = f"http://127.0.0.1:{port}"
    try:
        with ollama_standin(ollama_port) as ollama_url:
            started = run_doc(retarget(up, ports), env, timeout_s=INSTALL_AND_START_TIMEOUT_S)
            output = started.stdout + started.stderr
            assert started.returncode == 0, output
            assert "vLLM already up" in output and "Open WebUI is up" in output, output
            assert f"talks to    vllm http://127.0.0.1:{vllm_server.port}/v1 ({MODEL})" in output, output
            assert f"Ollama      {ollama_url} (" in output, output

            again = run_doc(retarget(up, ports), env, timeout_s=300)  # the same connections: left as it is
            assert again.returncode == 0 and "Open WebUI already up" in again.stdout, again.stdout + again.stderr

            answer = run_doc(retarget(version, ports), env, timeout_s=60)
            assert json.loads(answer.stdout)["version"] == OPEN_WEBUI_VERSION, answer.stdout

            listed = httpx.get(f"{base}/api/models", headers=signed_in(base), timeout=60).json()["data"]
            assert {model["id"] for model in listed} >= {MODEL, "smollm2:135m"}, listed  # the kit's, the Ollama's

            done_before = scrape(vllm_server.base_url).requests_done_total
            reply = chat(base, PROMPT)
            wait_until(
                lambda: scrape(vllm_server.base_url).requests_done_total > done_before,
                30,
                "vLLM's /metrics to count the page's request",
            )
            # the answer streamed onto the page (it grew on the way) from vLLM; Open WebUI sent its time tools with it
            # (DEFAULT_MODEL_METADATA), so the prompt is not the bare question's: vLLM answered, no 400, no overflow
            assert reply.model == MODEL and len(reply.seen) > 1, reply
            assert reply.answer.strip() and "maximum context length" not in reply.answer, reply

            # Open WebUI calls a tool: SmolLM2-135M picks none by itself (labs/contract.md), so the model's own
            # settings name one, as a person sets them (Advanced Params, custom parameters: tool_choice); Open WebUI
            # runs it and shows its result. CHAT_RESPONSE_MAX_TOOL_CALL_ITERATIONS=1 ends the turn there (named every
            # time, the model would call it again and again)
            forced = {"tool_choice": json.dumps({"type": "function", "function": {"name": TIME_TOOL}})}
            model = {
                "id": MODEL,
                "name": MODEL,
                "meta": json.loads(open_webui.TIME_TOOLS_ONLY),
                "params": {"temperature": 0, "custom_params": forced},
            }
            created = httpx.post(f"{base}/api/v1/models/create", json=model, headers=signed_in(base), timeout=60)
            assert created.status_code == 200, created.text
            try:
                before_s = time.time()
                result = json.loads(tool_result(base, "What time is it now?", TIME_TOOL))
            finally:  # the data folder outlives the test: the next run's chats must not be forced
                forgotten = httpx.post(
                    f"{base}/api/v1/models/model/delete", json={"id": MODEL}, headers=signed_in(base), timeout=60
                )
            assert forgotten.status_code == 200, forgotten.text
            assert before_s - 60 <= result["current_timestamp"] <= time.time() + 60, result
    finally:
        keep_vllm = {**env, "ENGINES": "llamaserver", "LLAMA_SERVER_PORT": str(free_port())}
        down = run_doc(down_command, keep_vllm, timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Open WebUI (pid" in down.stdout and process.port_is_free("127.0.0.1", port), down.stdout
    assert httpx.get(f"{vllm_server.base_url}/health", timeout=10).status_code == 200
