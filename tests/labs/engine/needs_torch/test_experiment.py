"""The seed study end to end at a small size, as a user runs it, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labs.engine import experiment as experiment_module
from tests.labs.engine.needs_torch.conftest import ROOT, TEST_THREADS

SMALL = [
    "--requests",
    "6",
    "--rate",
    "25",
    "--short-tokens",
    "6",
    "--long-tokens",
    "20",
    "--threads",
    str(TEST_THREADS),
]


def experiment(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labs.engine.experiment", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_small_study_prints_the_tables_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "study.json"
    result = experiment(*SMALL, "--batches", "2,4", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    for title in ("Static vs continuous batching", "Continuous / static", "KV slots at the peak"):
        assert title in result.stdout
    study = json.loads(out.read_text())
    runs = study["results"]
    assert [(r["policy"], r["max_batch_size"]) for r in runs] == [
        ("static", 2),
        ("continuous", 2),
        ("static", 4),
        ("continuous", 4),
    ]
    for r in runs:
        assert r["num_requests"] == 6 and r["output_tokens_per_s"] > 0
        assert 0 < r["ttft_p50_ms"] <= r["ttft_p95_ms"] <= r["ttft_p99_ms"]
        assert r["kv_live_tokens"] <= r["kv_paged_slots"] < r["kv_max_len_slots"]
        assert r["kv_paged_slots"] % 16 == 0 and r["kv_max_len_slots"] % 512 == 0


def test_a_pool_too_small_preempts_instead_of_crashing(tmp_path: Path) -> None:
    out = tmp_path / "small-pool.json"
    # prompts of ~35-40 tokens fill 3 blocks of 16; 16 more tokens need a 4th: 3 admitted, 1 spare block
    result = experiment(
        *SMALL,
        "--rate",
        "100",
        "--batches",
        "6",
        "--policies",
        "continuous",
        "--lengths",
        "uniform",
        "--short-tokens",
        "16",
        "--max-model-len",
        "160",
        "--num-blocks",
        "10",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run = json.loads(out.read_text())["results"][0]
    assert run["num_preemptions"] > 0 and run["num_requests"] == 6


def test_prefix_caching_on_a_shared_prefix_reports_hits(tmp_path: Path) -> None:
    out = tmp_path / "prefix.json"
    result = experiment(
        *SMALL,
        "--batches",
        "4",
        "--policies",
        "continuous",
        "--lengths",
        "uniform",
        "--shared-prefix",
        "--prefix-caching",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(out.read_text())["results"][0]["prefix_hit_rate"] > 0.5


def test_bad_options_give_one_line_naming_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    for args, expected in (
        (["--batches", "2,x"], "use whole numbers separated by commas"),
        (["--num-blocks", "3"], "use num_blocks >= 32"),
        (["--rate", "0"], "argument --rate: '0' is not a finite number greater than 0"),
    ):
        try:
            code = experiment_module.main(args)
        except SystemExit as exited:  # refused by the parser itself
            code = exited.code
        assert code == 2
        printed = capsys.readouterr().err  # errors go to stderr
        assert expected in printed.replace("\n", " ") and printed.count("error:") == 1, printed
