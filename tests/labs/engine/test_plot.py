"""labs.engine.plot runs in the light venv: it draws the experiment's JSON and never needs torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def plot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labs.engine.plot", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def run(policy: str, batch: int, ttft_ms: float) -> dict:
    return {"policy": policy, "max_batch_size": batch, "ttft_p50_ms": ttft_ms, "output_tokens_per_s": 10.0 * batch,
            "kv_live_tokens": 100 * batch, "kv_paged_slots": 112 * batch, "kv_max_len_slots": 512 * batch}


def test_plot_draws_a_png_next_to_the_json_without_torch(tmp_path: Path) -> None:
    study = tmp_path / "study.json"
    study.write_text(json.dumps({"args": {"requests": 4, "rate": 25, "lengths": "mixed", "block_size": 16},
                                 "results": [run("static", 2, 900), run("continuous", 2, 300),
                                             run("static", 4, 700), run("continuous", 4, 100)]}))
    result = plot(str(study))
    assert result.returncode == 0, result.stderr
    png = tmp_path / "study.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in result.stdout
    check = subprocess.run([sys.executable, "-c", "import sys, labs.engine.plot; print('torch' in sys.modules)"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "False"


def test_a_missing_or_wrong_file_is_one_line(tmp_path: Path) -> None:
    for path, content in ((tmp_path / "absent.json", None), (tmp_path / "empty.json", '{"results": []}'),
                          (tmp_path / "other.json", '{"runs": 1}')):
        if content is not None:
            path.write_text(content)
        result = plot(str(path))
        assert result.returncode == 2 and "run labs.engine.experiment first" in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
