"""labs/engine.md: every command on the page runs (at small sizes) and does what the page says.

The engine's commands run in the vLLM venv (`.kit/vllm/bin/python`, prepared by tests/run.sh); the
server command is started in the background, as the page's "in another terminal" says, and stopped here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Server
from tests.support.docs import doc_commands, run_page

pytestmark = [pytest.mark.server, pytest.mark.slow]
PAGE = "labs/engine.md"
# the page's sizes cut down so the suite stays short (the last occurrence of an option wins)
SMALL_EXPERIMENT = "--requests 4 --batches 4 --short-tokens 4 --long-tokens 12 --threads 1"
SMALL_LOADTEST = "--requests 4 --lengths fixed:8"
SMALL_SPEED = "--batches 2 --new-tokens 4 --repeats 1 --threads 1"


def test_lab_page_commands_run(vllm_server: Server, tmp_path: Path) -> None:
    commands = doc_commands(PAGE)
    assert commands[0] == ".kit/vllm/bin/python -m labs.engine.experiment"
    ports = {8009: vllm_server.port}

    def sized(index: int, command: str, actual: str) -> str:
        actual = actual.replace("results/engine/", f"{tmp_path}/")
        if "-m labs.engine.experiment" in command:
            out = tmp_path / "study.json" if index == 0 else tmp_path / f"try-{index}.json"
            return f"{actual} {SMALL_EXPERIMENT} --out {out}"
        if "-m labs.loadtest" in command:
            return f"{actual} {SMALL_LOADTEST} --out {tmp_path / 'loadtest'}"
        if "-m benchmarks.engine_speed" in command:
            return f"{actual} {SMALL_SPEED}"
        return actual

    outputs = run_page(commands, vllm_server.client_env(), ports, sized)

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
