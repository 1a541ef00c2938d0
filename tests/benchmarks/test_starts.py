"""The start benchmark (benchmarks/starts.py): cold and warm starts of real vLLM engines, alternating arms.

Its smallest real run is one eager engine (no compile step: the cheapest real start), once cold and once warm;
the full comparison behind labs/measured/ (compiled arms, two rounds) takes tens of minutes and is not a test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.arms import Arm
from benchmarks.starts import summary
from tests.conftest import ROOT, kit_env


def start(arm: str, kind: str, healthy_s: float, token_s: float) -> dict[str, object]:
    return {
        "arm": arm,
        "kind": kind,
        "seconds_to_healthy": healthy_s,
        "launch_to_first_token_s": token_s,
        "cpu_s": 2 * healthy_s,
    }


def test_summary_takes_medians_per_arm_and_kind_and_ratios_to_the_first_arm() -> None:
    starts = [
        start("kit", "cold", 100, 101),
        start("kit", "cold", 120, 121),
        start("kit", "cold", 200, 201),
        start("eager", "cold", 30, 31),
        start("eager", "cold", 40, 41),
        start("kit", "warm", 20, 21),
        start("eager", "warm", 15, 16),
    ]
    rows = summary(starts, [Arm("kit", "vllm"), Arm("eager", "vllm")])
    by = {(row["arm"], row["kind"]): row for row in rows}
    assert by["kit", "cold"]["median_seconds_to_healthy"] == 120 and by["kit", "cold"]["starts"] == 3
    assert by["kit", "cold"]["median_cpu_s"] == 240
    assert by["eager", "cold"]["median_launch_to_first_token_s"] == 36
    assert by["eager", "cold"]["first_token_vs_baseline"] == pytest.approx(36 / 121)
    assert by["eager", "warm"]["first_token_vs_baseline"] == pytest.approx(16 / 21)


def test_an_unknown_or_non_vllm_arm_is_refused_before_anything_starts() -> None:
    for arms, named in (("kit,llamacpp", "llamacpp"), ("kit,fast", "fast")):
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.starts", "--arms", arms], cwd=ROOT, capture_output=True, text=True
        )
        assert result.returncode == 2 and named in result.stderr and "Starting vLLM" not in result.stdout


@pytest.mark.server
@pytest.mark.slow
def test_an_eager_engine_cold_then_warm(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.starts",
            "--arms",
            "",
            "--arm",
            "eager",
            "ENFORCE_EAGER=true",
            "--rounds",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=kit_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    kinds = [(item["arm"], item["kind"], item["compile_cache"]) for item in report["starts"]]
    assert kinds == [("eager", "cold", "eager: nothing compiled"), ("eager", "warm", "eager: nothing compiled")]
    for item in report["starts"]:
        phases = item["phase_starts_s"]
        # the engine's log stamps whole seconds: a warm engine can reach its weights within the second it started
        assert (
            0
            < phases["engine"]
            <= phases["weights"]
            <= phases["kv-cache"]
            <= phases["http"]
            <= item["seconds_to_healthy"] + 1
        )
        assert "compile" not in phases and item["health_to_first_token_s"] > 0 and item["cpu_s"] > 1
    assert report["envelope"]["command"].startswith("python -m benchmarks.starts")
