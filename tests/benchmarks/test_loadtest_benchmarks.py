"""The load tester's benchmark scripts still run and print their figures (small sizes; no timing asserted:
the goals are the scripts' own verdicts, read from a full run on a quiet machine)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from benchmarks.loadtest_overhead import GOAL_REQUESTS_PER_S
from tests.conftest import MODEL, ROOT, Server, run_bounded


def script(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m benchmarks.<module>`, as the lab page runs it, from the repository root."""
    return run_bounded([sys.executable, "-m", f"benchmarks.{module}", *args], env, timeout_s=600, cwd=ROOT)


def test_overhead_script_prints_rate_and_timing_error() -> None:
    result = script("loadtest_overhead", "--rates", "20,40", "--seconds", "1")
    # the script's own verdict: at 20 and 40 req/s offered, the sustained rate cannot reach the goal
    assert f"(goal >= {GOAL_REQUESTS_PER_S:.0f} req/s" in result.stdout and "): NOT met" in result.stdout, result.stdout
    assert result.returncode == 1, result.stderr
    lines = re.findall(r"offered +(\d+) req/s +achieved +([\d.]+) req/s +ok +(\d+)/(\d+) +timing error", result.stdout)
    assert [(offered, ok, total) for offered, _, ok, total in lines] == [("20", "20", "20"), ("40", "40", "40")]
    assert "closed loop, 32 users:" in result.stdout and "sustained on one core:" in result.stdout


@pytest.mark.server
@pytest.mark.slow
def test_agreement_script_runs_both_tools_on_the_real_server(vllm_server: Server) -> None:
    result = script(
        "loadtest_agreement",
        "--base-url",
        vllm_server.api_url,
        "--model",
        MODEL,
        "--requests",
        "4",
        "--rate",
        "4",
        "--output-len",
        "8",
        "--rounds",
        "1",
        env=vllm_server.client_env(),
    )
    verdicts = re.findall(r"ratio [\d.]+ +(within|OUTSIDE) ", result.stdout)
    assert len(verdicts) == 2, result.stdout  # TTFT and output tok/s, each judged
    assert result.returncode == (0 if verdicts == ["within", "within"] else 1), result.stdout + result.stderr
    assert re.search(r"round 1 ours +completed +4 ", result.stdout) and re.search(
        r"round 1 vllm +completed +4 ", result.stdout
    ), result.stdout
    assert re.search(r"ttft_median_ms +ours +[\d.]+ +vllm bench +[\d.]+ +ratio [\d.]+", result.stdout)
    assert re.search(r"output_tokens_per_s +ours +[\d.]+ +vllm bench +[\d.]+ +ratio [\d.]+", result.stdout)
