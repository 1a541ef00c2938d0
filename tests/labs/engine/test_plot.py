"""labs.engine.plot runs in the light venv: it draws the experiment's JSON and never needs torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from labs.engine.study import BatchingResult, write_study
from labs.results import Envelope, command_line, write
from tests.conftest import ROOT


def plot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labs.engine.plot", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def run(policy: str, batch: int, ttft_ms: float) -> BatchingResult:
    return BatchingResult(
        policy=policy,
        max_batch_size=batch,
        num_requests=4,
        output_tokens_per_s=10.0 * batch,
        ttft_p50_ms=ttft_ms,
        ttft_p95_ms=ttft_ms,
        ttft_p99_ms=ttft_ms,
        e2e_p99_s=1.0,
        num_preemptions=0,
        prefix_hit_rate=0.0,
        kv_live_tokens=100 * batch,
        kv_paged_slots=112 * batch,
        kv_max_len_slots=512 * batch,
        kv_max_len_over_paged=4.6,
        num_steps=10,
        wall_s=1.0,
    )


def test_plot_draws_a_png_next_to_the_json_without_torch(tmp_path: Path) -> None:
    study = tmp_path / "study.json"
    write_study(
        study,
        Envelope.now(command_line("python -m labs.engine.experiment", ["--requests", "4"])),
        {"requests": 4, "rate": 25, "lengths": "mixed", "block_size": 16},
        [run("static", 2, 900), run("continuous", 2, 300), run("static", 4, 700), run("continuous", 4, 100)],
    )
    result = plot(str(study))
    assert result.returncode == 0, result.stderr
    png = tmp_path / "study.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in result.stdout
    check = subprocess.run(
        [sys.executable, "-c", "import sys, labs.engine.plot; print('torch' in sys.modules)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.stdout.strip() == "False"


def test_a_missing_or_wrong_file_is_one_line(tmp_path: Path) -> None:
    for path, content in (
        (tmp_path / "absent.json", None),
        (tmp_path / "empty.json", '{"results": []}'),
        (tmp_path / "other.json", '{"runs": 1}'),
    ):
        if content is not None:
            path.write_text(content)
        result = plot(str(path))
        assert result.returncode == 2 and "run labs.engine.experiment first" in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_another_labs_results_file_is_one_line(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    write(summary, Envelope.now("python -m labs.loadtest"), {"runs": []})  # enveloped, but not a study
    result = plot(str(summary))
    assert result.returncode == 2 and "is not a study" in result.stderr
    assert "run labs.engine.experiment first" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
