"""labs/loadtest.md: every command on the page runs against the real engines (at small sizes) and does what
the page says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Server, free_port
from tests.support.docs import doc_commands, retarget, run_doc

pytestmark = [pytest.mark.server, pytest.mark.slow]
PAGE = "labs/loadtest.md"
SMALL_REQUESTS = "6"  # the page's sizes, cut down so the suite stays short; the last --requests wins


def runs_of(out_dir: Path) -> list[dict]:
    return json.loads((out_dir / "summary.json").read_text())["runs"]


def test_lab_page_commands_run(vllm_server: Server, llamacpp_server: Server, tmp_path: Path) -> None:
    commands = doc_commands(PAGE)
    loadtests = [command for command in commands if "-m labs.loadtest" in command]
    assert commands[0] == "bash up.sh" and loadtests[0] == ".venv/bin/python -m labs.loadtest"
    spare_port = free_port()
    ports = {8009: vllm_server.port, 11434: llamacpp_server.port, 8010: spare_port}
    # ENGINES only where the page sets it (a down.sh with ENGINES=vllm,llamacpp would stop the shared llama.cpp);
    # the page's second vLLM starts faster uncompiled, and the shape it shows is the same
    env = {**vllm_server.client_env(), "LLAMACPP_PORT": str(llamacpp_server.port), "ENFORCE_EAGER": "true"}
    outputs: dict[str, Path] = {}
    try:
        for index, command in enumerate(commands):
            actual = retarget(command, ports)
            if command in loadtests:
                out_dir = tmp_path / str(index)
                actual += f" --requests {SMALL_REQUESTS} --out {out_dir}"
                outputs[command] = out_dir
            result = run_doc(actual, env, timeout_s=900)
            assert result.returncode == 0, f"{actual}\n{result.stdout}\n{result.stderr}"
            if command in ("bash up.sh", "ENGINES=vllm,llamacpp bash up.sh"):
                assert "already up" in result.stdout, result.stdout
            if command in loadtests:
                assert f"wrote {outputs[command] / 'report.html'}" in result.stdout, result.stdout
    finally:
        run_doc(f"VLLM_PORT={spare_port} bash down.sh", env, timeout_s=120)

    (default,) = runs_of(outputs[loadtests[0]])
    assert default["load"] == "25 req/s poisson" and default["summary"]["num_ok"] == 6
    bands = [(band["min_tokens"], band["max_tokens"], band["weight"]) for band in default["workload"]["lengths"]]
    assert bands == [(24, 24, 0.8), (150, 150, 0.2)]
    (overload,) = runs_of(outputs[".venv/bin/python -m labs.loadtest --rate 100"])
    assert overload["load"] == "100 req/s poisson" and overload["metrics_series"]
    uniform_dir = outputs[".venv/bin/python -m labs.loadtest --lengths fixed:48"]
    requests = json.loads((uniform_dir / "requests.json").read_text())
    assert {request["output_tokens"] for request in requests} == {48}
    sweeps = [command for command in loadtests if "--sweep" in command]
    assert [len(runs_of(outputs[command])) for command in sweeps] == [3, 3]
    assert all((outputs[command] / "load_curves.png").exists() for command in sweeps)
    seqs = next(command for command in loadtests if "seqs4" in command)
    assert [run["endpoint"]["name"] for run in runs_of(outputs[seqs])] == ["auto", "seqs4"]
    engines = runs_of(outputs[next(command for command in loadtests if "llamacpp=" in command)])
    assert [run["endpoint"]["name"] for run in engines] == ["vllm", "llamacpp"]
    assert engines[0]["metrics_series"] and "not with vLLM's gauges" in engines[1]["metrics_note"]
