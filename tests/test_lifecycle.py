"""up.sh / down.sh as a user runs them: start, API key, stop everything, stale pidfiles, failed starts."""

from __future__ import annotations

import subprocess
import time
import sys

import httpx
import pytest

from serve import process
from serve.local_server import RUN_DIR
from serve.vllm_command import API_SERVER_MODULE
from tests.conftest import ROOT, free_port, kit_env, run_script, start_server

pytestmark = [pytest.mark.server, pytest.mark.slow]
KEY = "lab-kit-test-key"


def test_api_key_is_honoured_and_down_leaves_nothing_behind() -> None:
    server = start_server(ENFORCE_EAGER="true", VLLM_API_KEY=KEY)
    pid = process.PidFile(RUN_DIR / f"vllm-{server.port}.pid", API_SERVER_MODULE).live_pid()
    try:
        assert pid is not None and len(process.group_members(pid)) >= 2  # api server + engine core
        assert httpx.get(f"{server.api_url}/models", timeout=10).status_code == 401
        authorized = httpx.get(f"{server.api_url}/models", timeout=10, headers={"Authorization": f"Bearer {KEY}"})
        assert authorized.status_code == 200
        client = subprocess.run([sys.executable, "-m", "client", "--max-tokens", "8", "Say OK."], cwd=ROOT,
                                capture_output=True, text=True, timeout=120,
                                env=server.client_env(VLLM_API_KEY=KEY))
        assert client.returncode == 0 and client.stdout.strip(), client.stderr
        # a real OpenAI key exported in the shell is not what the kit's engine gets
        both = subprocess.run([sys.executable, "-m", "client", "--max-tokens", "8", "Say OK."], cwd=ROOT,
                              capture_output=True, text=True, timeout=120,
                              env=server.client_env(VLLM_API_KEY=KEY, OPENAI_API_KEY="sk-a-real-openai-key"))
        assert both.returncode == 0 and both.stdout.strip(), both.stderr
        wrong = subprocess.run([sys.executable, "-m", "client", "Hi"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120, env=server.client_env(VLLM_API_KEY="wrong"))
        assert wrong.returncode == 1, wrong.stderr
        assert "refused the request (the key from VLLM_API_KEY was sent)" in wrong.stderr, wrong.stderr
    finally:
        down = run_script("down.sh", server.env, timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped" in down.stdout
    assert process.group_members(pid) == []
    assert process.port_is_free("127.0.0.1", server.port)
    assert not (RUN_DIR / f"vllm-{server.port}.pid").exists()
    again = run_script("down.sh", server.env, timeout_s=60)
    assert again.returncode == 0 and "Nothing to stop" in again.stdout


def test_a_server_that_dies_during_start_shows_its_log_and_fails() -> None:
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native", VLLM_EXTRA_ARGS="--no-such-flag")
    result = run_script("up.sh", env, timeout_s=300)
    assert result.returncode == 1
    assert "the server exited during start" in result.stderr
    assert "--no-such-flag" in result.stderr  # the log's tail: vLLM's own complaint
    assert not (RUN_DIR / f"vllm-{port}.pid").exists()
    assert process.port_is_free("127.0.0.1", port)


def test_a_stale_pidfile_is_cleaned() -> None:
    port = free_port()
    pidfile = RUN_DIR / f"vllm-{port}.pid"
    dead = subprocess.Popen(["true"])
    dead.wait()
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{dead.pid}\n")
    result = run_script("down.sh", kit_env(VLLM_PORT=str(port)), timeout_s=60)
    assert result.returncode == 0
    assert "Removing the stale pidfile" in result.stdout and "Nothing to stop" in result.stdout
    assert not pidfile.exists()



def test_an_engine_that_fails_to_start_is_reported_in_seconds_not_at_the_timeout() -> None:
    """A compilation config vLLM 0.32 cannot build on CPU: the engine core dies, its API server lingers without
    /health. up.sh reads the log's verdict, stops the group and shows the root cause, long before START_TIMEOUT."""
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native", START_TIMEOUT="1800",
                  VLLM_EXTRA_ARGS="""--compilation-config '{"inductor_compile_config":{"cpp_wrapper":true}}'""")
    started = time.monotonic()
    result = run_script("up.sh", env, timeout_s=900)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the engine failed to start" in result.stderr and "Root cause, as logged" in result.stderr
    assert "NotImplementedError" in result.stderr, result.stderr  # inductor's own complaint, not only the last line
    assert time.monotonic() - started < 900
    assert not (RUN_DIR / f"vllm-{port}.pid").exists()
    assert process.port_is_free("127.0.0.1", port)
