"""The two measurements behind the tool-call figures of labs/contract.md: the model's own skill under
tool_choice auto (benchmarks/tool_choice_skill.py) and same greedy answers on two engines (benchmarks/same_answers.py),
each run for real against the session's vLLM, and each refusing bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labs.results import load
from tests.conftest import MODEL, Server, free_port
from tests.support.docs import run_doc


@pytest.mark.slow
def test_the_skill_benchmark_counts_the_models_own_picks_on_the_real_vllm(vllm_server: Server, tmp_path: Path) -> None:
    run = run_doc(
        f".venv/bin/python -m benchmarks.tool_choice_skill --endpoint kit={vllm_server.api_url}@{MODEL} "
        f"--out {tmp_path}",
        None,
        timeout_s=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    envelope, report = load(tmp_path / "results.json")
    picks = report["picks"]
    assert len(picks) == report["num_wanted"] + report["num_not_wanted"] and envelope.engines[0].model == MODEL
    assert report["called_when_wanted"] == sum(pick["called"] for pick in picks if pick["wants_tool"])
    assert all(pick["answer"] for pick in picks)  # a call or a text, never an error
    assert report["calls_with_arguments_fitting_the_schema"] == sum(pick["called"] for pick in picks)


@pytest.mark.slow
def test_same_answers_finds_an_engine_the_same_as_itself(vllm_server: Server, tmp_path: Path) -> None:
    url = f"{vllm_server.api_url}@{MODEL}"
    run = run_doc(
        f".venv/bin/python -m benchmarks.same_answers --endpoint a={url} --endpoint b={url} --max-tokens 8 "
        f"--out {tmp_path}",
        None,
        timeout_s=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["num_same"] == report["num_prompts"] > 0, report


def test_bad_input_gets_one_line_naming_the_fix(tmp_path: Path) -> None:
    one = run_doc(".venv/bin/python -m benchmarks.same_answers --endpoint a=http://127.0.0.1:9/v1@m", None, 60)
    assert one.returncode == 2 and "give two engines or more" in one.stderr, one.stderr
    gone = f"http://127.0.0.1:{free_port()}/v1@m"
    unreachable = run_doc(f".venv/bin/python -m benchmarks.tool_choice_skill --endpoint gone={gone}", None, 60)
    assert unreachable.returncode == 2 and "cannot reach" in unreachable.stderr, unreachable.stderr
    assert "Traceback" not in one.stderr + unreachable.stderr
