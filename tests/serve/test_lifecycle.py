"""up.sh / down.sh as a user runs them: start, API key, stop everything, stale pidfiles, failed starts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from serve.config.vllm_flags import API_SERVER_MODULE
from serve.processes import process
from serve.processes.local_server import RUN_DIR
from tests.conftest import MODEL, ROOT, Server, free_port, kit_env, run_script, start_server

pytestmark = [pytest.mark.server, pytest.mark.slow]
KEY = "lab-kit-test-key"


def test_api_key_is_honoured_and_down_leaves_nothing_behind(tmp_path: Path) -> None:
    server = start_server(ENFORCE_EAGER="true", VLLM_API_KEY=KEY)
    pid = process.PidFile(RUN_DIR / f"vllm-{server.port}.pid", API_SERVER_MODULE).live_pid()
    try:
        assert pid is not None and len(process.group_members(pid)) >= 2  # api server + engine core
        assert httpx.get(f"{server.api_url}/models", timeout=10).status_code == 401
        authorized = httpx.get(f"{server.api_url}/models", timeout=10, headers={"Authorization": f"Bearer {KEY}"})
        assert authorized.status_code == 200
        # vLLM itself guards only /v1: every route that runs the model needs the key too
        completion = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4}
        for path, body in (("/invocations", completion), ("/tokenize", {"model": MODEL, "prompt": "Paris"})):
            assert httpx.post(f"{server.base_url}{path}", json=body, timeout=60).status_code == 401, path
            wrong_key = httpx.post(
                f"{server.base_url}{path}", json=body, timeout=60, headers={"Authorization": "Bearer not-the-key"}
            )
            assert wrong_key.status_code == 401, path
            keyed = httpx.post(
                f"{server.base_url}{path}", json=body, timeout=60, headers={"Authorization": f"Bearer {KEY}"}
            )
            assert keyed.status_code == 200, (path, keyed.text)
        # no key and a wrong key get 401 with OpenAI's error object (the kit's middleware answers, not vLLM's string)
        contract = subprocess.run(
            [
                sys.executable,
                "-m",
                "labs.contract",
                "--endpoint",
                f"engine={server.api_url}@{MODEL}",
                "--checks",
                "models,error_auth",
                "--out",
                str(tmp_path),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=server.client_env(VLLM_API_KEY=KEY),
        )
        assert contract.returncode == 0, contract.stdout + contract.stderr
        assert ["error_auth", "✔"] in [line.split() for line in contract.stdout.splitlines()], contract.stdout
        for open_path in ("/health", "/metrics"):  # probes and Prometheus, by design (README)
            assert httpx.get(f"{server.base_url}{open_path}", timeout=10).status_code == 200, open_path
        client = subprocess.run(
            [sys.executable, "-m", "client", "--max-tokens", "8", "Say OK."],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=server.client_env(VLLM_API_KEY=KEY),
        )
        assert client.returncode == 0 and client.stdout.strip(), client.stderr
        # a real OpenAI key exported in the shell is not what the kit's engine gets
        both = subprocess.run(
            [sys.executable, "-m", "client", "--max-tokens", "8", "Say OK."],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=server.client_env(VLLM_API_KEY=KEY, OPENAI_API_KEY="sk-a-real-openai-key"),
        )
        assert both.returncode == 0 and both.stdout.strip(), both.stderr
        wrong = subprocess.run(
            [sys.executable, "-m", "client", "Hi"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=server.client_env(VLLM_API_KEY="wrong"),
        )
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
    result = run_script("down.sh", kit_env(VLLM_PORT=str(port), RUNTIME="native"), timeout_s=60)
    assert result.returncode == 0
    assert "Removing the stale pidfile" in result.stdout and "Nothing to stop" in result.stdout
    assert not pidfile.exists()


def test_an_engine_that_fails_to_start_is_reported_in_seconds_not_at_the_timeout() -> None:
    """A load format the model folder has no weights for (`pt`: *.pt files; the folder holds safetensors): the
    engine's worker fails while loading, after the API server is up but before /health answers. up.sh reads the
    log's verdict, stops the group and shows the root cause, long before START_TIMEOUT."""
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native", START_TIMEOUT="1800", VLLM_EXTRA_ARGS="--load-format pt")
    started = time.monotonic()
    result = run_script("up.sh", env, timeout_s=900)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the engine failed to start" in result.stderr and "Root cause, as logged" in result.stderr
    assert "Cannot find any model weights" in result.stderr, result.stderr  # the loader's own complaint
    assert time.monotonic() - started < 900
    assert not (RUN_DIR / f"vllm-{port}.pid").exists()
    assert process.port_is_free("127.0.0.1", port)


def test_a_live_unrelated_process_at_the_recorded_pid_is_left_alone(tmp_path: Path) -> None:
    """After a reboot or pid reuse the recorded pid may belong to another process, even one whose command line
    holds the server's module name; its start time differs from the recorded one, so down.sh leaves it be."""
    port = free_port()
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", API_SERVER_MODULE], start_new_session=True
    )
    pidfile = RUN_DIR / f"vllm-{port}.pid"
    try:
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        pidfile.write_text(f"{stranger.pid} {process.start_time(stranger.pid) - 3600}\n")  # started an hour "earlier"
        down = run_script("down.sh", kit_env(VLLM_PORT=str(port), RUNTIME="native"), timeout_s=120)
        assert down.returncode == 0 and "Nothing to stop" in down.stdout, down.stdout + down.stderr
        assert stranger.poll() is None, "down.sh signalled a process that is not the kit's server"
        assert not pidfile.exists()  # the stale record is gone
    finally:
        stranger.kill()
        stranger.wait()
        pidfile.unlink(missing_ok=True)


def background(script: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(ROOT / script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_two_up_sh_at_once_start_exactly_one_server_which_loads_the_compile_cache(vllm_server: Server) -> None:
    """The kit's defaults, as the session's server has them: that server compiled and saved the model, so the one
    server these two start loads it (a warm restart) rather than compiling again."""
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native")
    ups = [background("up.sh", env) for _ in range(2)]
    try:
        outputs = [up.communicate(timeout=900) for up in ups]
        pid = process.PidFile(RUN_DIR / f"vllm-{port}.pid", API_SERVER_MODULE).live_pid()
    finally:
        for up in ups:
            if up.poll() is None:
                process.stop_group(up.pid, grace_s=10)
        down = run_script("down.sh", env, timeout_s=120)
    texts = [out + err for out, err in outputs]
    assert [up.returncode for up in ups] == [0, 0], texts
    assert sorted("vLLM is up" in text for text in texts) == [False, True], texts  # one started it ...
    assert any("already up" in text and "waiting for it to finish" in text for text in texts), texts  # ... one waited
    assert pid is not None and down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    assert process.group_members(pid) == [] and process.port_is_free("127.0.0.1", port)
    log = (ROOT / ".kit" / "logs" / f"vllm-{port}.log").read_text(errors="replace")
    assert "Directly load AOT compilation" in log and "load failure" not in log, log[-3000:]


def test_down_during_up_waits_for_the_start_then_stops_it() -> None:
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native", ENFORCE_EAGER="true")  # a start is a start: no compile
    pidfile = RUN_DIR / f"vllm-{port}.pid"
    up = background("up.sh", env)
    try:
        deadline = time.monotonic() + 300
        while not pidfile.exists() and up.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the server is launching: up.sh is in its health wait
        assert pidfile.exists(), "up.sh never launched the server"
        down = run_script("down.sh", env, timeout_s=900)
        up_out, up_err = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            process.stop_group(up.pid, grace_s=10)
        run_script("down.sh", env, timeout_s=120)
    assert up.returncode == 0 and "vLLM is up" in up_out, up_out + up_err  # the start was not cut short
    assert "waiting for it to finish" in down.stdout and "stopped" in down.stdout, down.stdout + down.stderr
    assert process.port_is_free("127.0.0.1", port) and not pidfile.exists()


def test_a_hub_model_the_hub_does_not_answer_for_is_refused_in_one_line_saying_what_to_set() -> None:
    """MODEL_NAME alone names a hub model; with no hub answering (HF_ENDPOINT at a closed port, as on these machines)
    up.sh says what to set, in one line, and starts nothing (it used to answer as Qwen with SmolLM2's weights)."""
    result = run_script(
        "up.sh",
        kit_env(
            VLLM_PORT=str(free_port()),
            RUNTIME="native",
            MODEL_NAME="Qwen/Qwen2.5-0.5B-Instruct",
            HF_ENDPOINT=f"http://127.0.0.1:{free_port()}",
        ),
        timeout_s=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: MODEL_NAME=Qwen/Qwen2.5-0.5B-Instruct: the hub at"), errors
    assert "HF_ENDPOINT" in errors[0] and "HF_TOKEN" in errors[0] and "MODEL_PATH" in errors[0]
    assert "Starting vLLM" not in result.stdout
