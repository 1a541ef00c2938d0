"""labs/engine.md: every command on the page runs (at small sizes) and does what the page says.

The engine's commands run in the vLLM venv (`.kit/vllm/bin/python`, prepared by tests/run.sh); the
server command is started in the background, as the page's "in another terminal" says, and stopped here.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, Server, free_port
from tests.support.docs import doc_commands, retarget, run_doc

pytestmark = [pytest.mark.server, pytest.mark.slow]
PAGE = "labs/engine.md"
ENGINE_PORT = 8012
# the page's sizes cut down so the suite stays short (the last occurrence of an option wins)
SMALL_EXPERIMENT = "--requests 4 --batches 4 --short-tokens 4 --long-tokens 12 --threads 1"
SMALL_LOADTEST = "--requests 4 --lengths fixed:8"
SMALL_SPEED = "--batches 2 --new-tokens 4 --repeats 1 --threads 1"
START_TIMEOUT_S = 180


def start_engine(command: str, env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command} --threads 1"],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    port = int(command.split("--port")[1].split()[0])
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    pytest.fail(f"{command} did not become healthy in {START_TIMEOUT_S} s")


def test_lab_page_commands_run(vllm_server: Server, tmp_path: Path) -> None:
    commands = doc_commands(PAGE)
    assert commands[0] == ".kit/vllm/bin/python -m labs.engine.experiment"
    ports = {8009: vllm_server.port, ENGINE_PORT: free_port()}
    env = vllm_server.client_env()
    engine: subprocess.Popen[str] | None = None
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    try:
        for index, command in enumerate(commands):
            actual = (
                retarget(command, ports)
                .replace("results/engine/", f"{tmp_path}/")
                .replace(f"--port {ENGINE_PORT}", f"--port {ports[ENGINE_PORT]}")
            )
            if "-m labs.engine.server" in command:
                engine = start_engine(actual, env)
                continue
            if "-m labs.engine.experiment" in command:
                out = tmp_path / "study.json" if index == 0 else tmp_path / f"try-{index}.json"
                actual += f" {SMALL_EXPERIMENT} --out {out}"
            elif "-m labs.loadtest" in command:
                actual += f" {SMALL_LOADTEST} --out {tmp_path / 'loadtest'}"
            elif "-m benchmarks.engine_speed" in command:
                actual += f" {SMALL_SPEED}"
            result = run_doc(actual, env, timeout_s=600)
            assert result.returncode == 0, f"{actual}\n{result.stdout}\n{result.stderr}"
            outputs[command] = result
    finally:
        if engine is not None:
            engine.send_signal(signal.SIGINT)
            engine.wait(timeout=30)

    study = json.loads((tmp_path / "study.json").read_text())
    assert [(run["policy"], run["max_batch_size"]) for run in study["results"]] == [("static", 4), ("continuous", 4)]
    assert "KV slots at the peak" in outputs[commands[0]].stdout
    assert (tmp_path / "study.png").stat().st_size > 0
    prefix = json.loads(
        (tmp_path / f"try-{commands.index(next(c for c in commands if '--prefix-caching' in c))}.json").read_text()
    )
    assert all(run["prefix_hit_rate"] > 0 for run in prefix["results"])
    curl = next(command for command in commands if command.startswith("curl"))
    assert json.loads(outputs[curl].stdout)["choices"][0]["message"]["content"]
    runs = json.loads((tmp_path / "loadtest" / "summary.json").read_text())["runs"]
    assert {run["endpoint"]["name"] for run in runs} == {"engine", "vllm"}
    assert all(run["summary"]["num_ok"] == 4 for run in runs)
    speed = outputs[".kit/vllm/bin/python -m benchmarks.engine_speed"].stdout
    assert "engine tok/s" in speed and "HF tok/s" in speed and "ratio" in speed
