"""The README's commands, run against the real server the harness started."""

from __future__ import annotations

import json

import pytest

from tests.conftest import MODEL, ROOT, Server, free_port
from tests.support.docs import doc_commands, is_docker_command, retarget, run_doc

pytestmark = [pytest.mark.server, pytest.mark.slow]
README = doc_commands("README.md")


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    assert README[:2] == ["bash up.sh", "bash tests/run.sh"]
    assert "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()


def test_readme_talk_commands(vllm_server: Server) -> None:
    talk = [command for command in README[2:] if "VLLM_PORT=8010" not in command and ":11434" not in command
            and not is_docker_command(command)]
    assert talk, "the README shows no commands to talk to the engine"
    for command in talk:
        result = run_doc(retarget(command, {8009: vllm_server.port}), vllm_server.client_env(), timeout_s=120)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        if command.startswith("curl"):
            body = json.loads(result.stdout)
            assert body["model"] == MODEL and body["choices"][0]["message"]["content"]
        else:
            assert result.stdout.strip(), command


def test_readme_client_switch_to_the_ollama_class_engine(llamacpp_server: Server) -> None:
    switch = [command for command in README if ":11434" in command]
    assert switch, "the README shows no command that switches the client to the Ollama-class engine"
    for command in switch:
        result = run_doc(retarget(command, {11434: llamacpp_server.port}), llamacpp_server.env,
                         timeout_s=120)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        assert result.stdout.strip(), command


def test_readme_port_override_retargets_up_client_and_down(vllm_server: Server) -> None:
    commands = [command for command in README if "VLLM_PORT=8010" in command]
    assert [command.split()[-1] for command in commands][0::2] == ["up.sh", "down.sh"]
    port = free_port()
    env = {**vllm_server.env, "ENFORCE_EAGER": "true"}
    env.pop("VLLM_PORT")
    outputs = []
    try:
        for command in commands:
            result = run_doc(retarget(command, {8010: port}), env)
            outputs.append(result)
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    finally:
        run_doc(f"VLLM_PORT={port} bash down.sh", env, timeout_s=120)
    up, client, down = outputs
    assert f"http://127.0.0.1:{port}/v1" in up.stdout
    assert client.stdout.strip()
    assert f"port {port} is free" in down.stdout
