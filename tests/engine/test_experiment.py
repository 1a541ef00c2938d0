"""The seed study end to end at a small size, as a user runs it, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.engine.conftest import ROOT, TEST_THREADS

SMALL = ["--requests", "6", "--rate", "25", "--threads", str(TEST_THREADS)]


def experiment(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labs.engine.experiment", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_small_study_prints_the_tables_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "study.json"
    result = experiment(*SMALL, "--batches", "2,4", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    for title in ("Static vs continuous batching", "Continuous / static", "KV slots at the peak"):
        assert title in result.stdout
    study = json.loads(out.read_text())
    runs = study["results"]
    assert [(r["policy"], r["max_batch_size"]) for r in runs] == [("static", 2), ("continuous", 2),
                                                                   ("static", 4), ("continuous", 4)]
    for r in runs:
        assert r["num_requests"] == 6 and r["output_tokens_per_s"] > 0
        assert 0 < r["ttft_p50_ms"] <= r["ttft_p95_ms"] <= r["ttft_p99_ms"]
        assert r["kv_live_tokens"] <= r["kv_paged_slots"] < r["kv_max_len_slots"]
        assert r["kv_paged_slots"] % 16 == 0 and r["kv_max_len_slots"] % 512 == 0


def test_a_pool_too_small_preempts_instead_of_crashing(tmp_path: Path) -> None:
    out = tmp_path / "small-pool.json"
    result = experiment(*SMALL, "--rate", "100", "--batches", "6", "--policies", "continuous",
                        "--max-model-len", "160", "--num-blocks", "12", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    run = json.loads(out.read_text())["results"][0]
    assert run["num_preemptions"] > 0 and run["num_requests"] == 6


def test_prefix_caching_on_a_shared_prefix_reports_hits(tmp_path: Path) -> None:
    out = tmp_path / "prefix.json"
    result = experiment(*SMALL, "--batches", "4", "--policies", "continuous", "--lengths", "uniform",
                        "--shared-prefix", "--prefix-caching", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(out.read_text())["results"][0]["prefix_hit_rate"] > 0.5


def test_bad_options_give_one_line_naming_the_fix() -> None:
    for args, expected in ((["--batches", "2,x"], "use whole numbers separated by commas"),
                           (["--num-blocks", "3"], "use num_blocks >= 32"),
                           (["--rate", "0"], "requests per second greater than 0")):
        result = experiment(*args)
        assert result.returncode == 2, result.stdout + result.stderr
        assert expected in result.stdout and "Traceback" not in result.stdout + result.stderr
