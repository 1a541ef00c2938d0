"""The load tester against the real engines (small N): every output, checked against vLLM's own counters."""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import httpx
import matplotlib.image
import pytest
from prometheus_client.parser import text_string_to_metric_families

from client.endpoint import Endpoint
from labs.loadtest import WorkloadSpec, parse_lengths, run_load, summarize
from labs.results import MeasuredEngine, load
from tests.conftest import LLAMACPP_MODEL, MODEL, ROOT, Server
from tests.support.loadtest_browser import check_page

pytestmark = [pytest.mark.server, pytest.mark.slow]
OUTPUTS = ("summary.json", "requests.json", "requests.csv", "summary.csv", "latency_cdf.png", "report.html")
# What `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py), in its units: s, req/s, tok/s, ms
VLLM_BENCH_KEYS = (
    "model_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "std", "p99")),
)


def loadtest(env: dict[str, str], *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labs.loadtest", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def vllm_counters(server: Server) -> dict[str, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def test_default_target_small_run_writes_every_output_and_agrees_with_vllm(vllm_server: Server, tmp_path: Path) -> None:
    before = vllm_counters(vllm_server)
    # /metrics read every 0.1 s while five 512-token answers stream for ~10 s: the series must catch one running,
    # even past a few seconds' stall of the shared machine (one froze client and server for 3.7 s of a 4 s run)
    result = loadtest(
        vllm_server.client_env(),
        "--requests",
        "6",
        "--rate",
        "4",
        "--lengths",
        "mix:6@0.5,512@0.5",
        "--warmup",
        "0",
        "--scrape-interval-s",
        "0.1",
        "--out",
        str(tmp_path),
    )
    after = vllm_counters(vllm_server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Load test" in result.stdout and f"wrote {tmp_path / 'report.html'}" in result.stdout
    for name in OUTPUTS + ("metrics_timeseries.png",):
        assert (tmp_path / name).stat().st_size > 0, name

    summary = json.loads((tmp_path / "summary.json").read_text())
    (run,) = summary["runs"]
    assert run["endpoint"] == {"name": "engine", "api_url": vllm_server.api_url, "model": MODEL}
    numbers = run["summary"]
    requests = json.loads((tmp_path / "requests.json").read_text())
    unwell = [
        {key: r[key] for key in ("outcome", "status", "error", "finish_reason", "output_tokens", "max_tokens", "text")}
        for r in requests
        if r["outcome"] != "ok"
    ]
    assert (numbers["num_ok"], numbers["num_truncated"], numbers["num_failed"]) == (6, 0, 0), unwell
    assert len(requests) == 6 and {r["max_tokens"] for r in requests} <= {6, 512}
    # ignore_eos honoured: every answer delivered exactly what it asked for, and vLLM counted the same tokens
    assert all(r["output_tokens"] == r["max_tokens"] for r in requests)
    assert numbers["total_output_tokens"] == sum(r["max_tokens"] for r in requests)
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert generated == numbers["total_output_tokens"]
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == numbers["total_prompt_tokens"]
    for r in requests:
        assert r["scheduled_s"] <= r["sent_s"] < r["first_token_s"] <= r["chunk_times_s"][-1] <= r["done_s"]
    assert 0 < numbers["ttft_ms"]["median"] <= numbers["e2e_ms"]["median"]
    assert numbers["tpot_ms"]["count"] == 6 and numbers["itl_ms"]["count"] > 0
    assert numbers["output_tokens_per_s"] == pytest.approx(numbers["total_output_tokens"] / numbers["duration_s"])

    series = run["metrics_series"]
    # a read that took over 2 s (a stall of the shared machine) is left out and said so; the rest are the series
    note = run["metrics_note"]
    assert note is None or "/metrics reads took over 2 s" in note, note
    assert len(series) >= 2 and {s["format"] for s in series} == {"v1"}
    # when it misses, say whether the sampler stalled (no snapshot while answers streamed) or the gauge read 0
    start_s = min(r["scheduled_s"] for r in requests)  # the first request is planned at offset 0: the run's start
    streaming = [(round(r["first_token_s"] - start_s, 2), round(r["done_s"] - start_s, 2)) for r in requests]
    seen = [(round(s["t_s"], 2), s["running"]) for s in series]
    assert max(s["running"] for s in series) >= 1, f"snapshots (t_s, running): {seen}; answers streamed {streaming}"
    assert all(0 <= s["kv_usage"] <= 1 for s in series)

    with (tmp_path / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["outcome"] for row in rows] == ["ok"] * 6 and all(float(row["ttft_ms"]) > 0 for row in rows)
    with (tmp_path / "summary.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["ttft_ms_median"]) == pytest.approx(numbers["ttft_ms"]["median"])
    for png in tmp_path.glob("*.png"):
        assert matplotlib.image.imread(png).shape[0] > 100, png

    envelope, payload = load(tmp_path / "summary.json")
    assert payload["runs"] == summary["runs"] and envelope.command.startswith("python -m labs.loadtest --requests 6")
    assert envelope.engines == (MeasuredEngine(MODEL, vllm_server.base_url, "vllm"),)
    # vLLM's benchmark names for the same numbers, so tools that read its results read these
    assert set(VLLM_BENCH_KEYS) <= set(run)
    assert (run["completed"], run["failed"], run["model_id"], run["num_prompts"]) == (6, 0, MODEL, 6)
    assert (run["request_rate"], run["max_concurrency"], run["burstiness"]) == (4.0, None, 1.0)
    assert (run["duration"], run["request_throughput"], run["output_throughput"]) == (
        numbers["duration_s"],
        numbers["request_throughput_per_s"],
        numbers["output_tokens_per_s"],
    )
    assert (run["total_input_tokens"], run["total_output_tokens"]) == (
        numbers["total_prompt_tokens"],
        numbers["total_output_tokens"],
    )
    for ours, theirs in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", "e2el")):
        for stat in ("mean", "median", "std", "p99"):
            assert run[f"{stat}_{theirs}_ms"] == numbers[ours][stat], (ours, stat)


def test_a_concurrency_cap_queues_on_the_client_not_inside_ttft(vllm_server: Server) -> None:
    spec = WorkloadSpec(num_requests=4, rate_rps=50.0, concurrency=1, lengths=parse_lengths("fixed:8"))
    result = asyncio.run(run_load(Endpoint("vllm", vllm_server.api_url, MODEL), spec, scrape_interval_s=None))
    records = sorted(result.records, key=lambda record: record.sent_s)
    assert all(record.ok for record in records)
    for earlier, later in pairwise(records):  # one at a time: each is sent after the previous ended
        assert later.sent_s >= earlier.done_s
    assert records[-1].sent_s - records[-1].scheduled_s > records[0].done_s - records[0].sent_s
    assert all(record.first_token_s - record.sent_s < 5.0 for record in records)
    summary = summarize(result.records)  # the library's own numbers, as the CLI prints them
    assert summary.num_ok == 4 and summary.total_output_tokens == 4 * 8, summary


def test_sweep_side_by_side_with_llamacpp_and_the_report_in_chromium(
    vllm_server: Server, llamacpp_server: Server, tmp_path: Path
) -> None:
    result = loadtest(
        vllm_server.client_env(),
        "--endpoint",
        f"vllm={vllm_server.api_url}",
        "--endpoint",
        f"llamacpp={llamacpp_server.api_url}",
        "--sweep-concurrency",
        "1,2",
        "--requests",
        "3",
        "--lengths",
        "fixed:8",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads((tmp_path / "summary.json").read_text())["runs"]
    assert [(run["endpoint"]["name"], run["load"]) for run in runs] == [
        ("vllm", "1 user"),
        ("vllm", "2 users"),
        ("llamacpp", "1 user"),
        ("llamacpp", "2 users"),
    ]
    assert runs[2]["endpoint"]["model"] == LLAMACPP_MODEL
    assert all(run["metrics_series"] and run["metrics_note"] is None for run in runs[:2])
    # llama.cpp's /metrics answers with its own llamacpp:* names, not the vLLM gauges the series reads
    assert all(not run["metrics_series"] and "not with vLLM's gauges" in run["metrics_note"] for run in runs[2:])
    assert runs[0]["summary"]["num_ok"] == 3 and runs[2]["summary"]["num_failed"] == 0
    assert "llamacpp: " in result.stdout and "not with vLLM's gauges" in result.stdout  # a note, not an error

    page = check_page(tmp_path / "report.html")
    assert page.title == "Load test report"
    assert len(page.images) == 3 and not page.broken_images, page.images  # CDFs, load curves, /metrics
    assert page.errors == []
    for text in ("vllm", "llamacpp", "2 users", "ttft_ms", "time to first token", "not with vLLM's gauges"):
        assert text in page.text, text
