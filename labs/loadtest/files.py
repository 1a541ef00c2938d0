"""REPORTING, data files: summary.json (in the results envelope), requests.json, requests.csv and summary.csv.

Only presents: every number comes from labs/loadtest/aggregate.py (rounded here for the CSV)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from client.stream import RequestRecord
from labs.loadtest.aggregate import DEFINITIONS, Peaks, Summary, e2e_ms, queue_ms, ttft_ms
from labs.loadtest.runner import RunResult
from labs.results import Envelope, write

SUMMARY_JSON = "summary.json"
REQUESTS_JSON = "requests.json"
REQUESTS_CSV = "requests.csv"
SUMMARY_CSV = "summary.csv"
REQUEST_COLUMNS = (
    "endpoint",
    "load",
    "request_id",
    "outcome",
    "status",
    "finish_reason",
    "max_tokens",
    "prompt_tokens",
    "output_tokens",
    "num_chunks",
    "queue_ms",
    "ttft_ms",
    "e2e_ms",
    "error",
)


def run_dict(result: RunResult, summary: Summary) -> dict[str, Any]:
    spec = asdict(result.spec)
    spec.pop("prompts")
    peaks = Peaks.of(result.snapshots)
    # `vllm bench serve`'s setup names next to its metric names: a run reads as one of its result files
    bench_setup = {
        "model_id": result.target.model,
        "num_prompts": result.spec.num_requests,
        "request_rate": "inf" if result.spec.rate_rps is None else result.spec.rate_rps,
        "burstiness": result.spec.burstiness,
        "max_concurrency": result.spec.concurrency,
    }
    return {
        "endpoint": {"name": result.target.name, "api_url": result.target.base_url, "model": result.target.model},
        "load": result.spec.label,
        "load_value": result.spec.load_value,
        "workload": spec,
        "summary": summary.to_dict(),
        "metrics_note": result.metrics_note,
        "served_by_replica": result.served_by_replica,  # behind the kit's router; {} otherwise
        "metrics_peaks": peaks.to_dict() if peaks else None,
        "metrics_series": [
            {
                "t_s": snapshot.taken_s - result.started_s,
                "running": snapshot.running,
                "waiting": snapshot.waiting,
                "kv_usage": snapshot.kv_usage,
                "preemptions_total": snapshot.preemptions_total,
                "format": snapshot.format,
            }
            for snapshot in result.snapshots
        ],
        **bench_setup,
        **summary.vllm_bench_fields(),
    }


def _rounded(value_ms: float | None) -> float | None:
    return None if value_ms is None else round(value_ms, 3)


def request_row(result: RunResult, record: RequestRecord, record_dict: dict[str, Any]) -> dict[str, Any]:
    return {
        "endpoint": result.target.name,
        "load": result.spec.label,
        "request_id": record_dict["request_id"],
        "outcome": record_dict["outcome"],
        "status": record_dict["status"],
        "finish_reason": record_dict["finish_reason"],
        "max_tokens": record_dict["max_tokens"],
        "prompt_tokens": record_dict["prompt_tokens"],
        "output_tokens": record_dict["output_tokens"],
        "num_chunks": len(record_dict["chunk_times_s"]),
        "queue_ms": _rounded(queue_ms(record)),
        "ttft_ms": _rounded(ttft_ms(record)),
        "e2e_ms": _rounded(e2e_ms(record)),
        "error": record_dict["error"],
    }


def write_data(out_dir: Path, results: Sequence[tuple[RunResult, Summary]], envelope: Envelope) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [run_dict(result, summary) for result, summary in results]
    summary_path = write(out_dir / SUMMARY_JSON, envelope, {"definitions": DEFINITIONS, "runs": runs})

    per_request = []
    rows = []
    for result, _ in results:
        for record in result.records:
            record_dict = record.to_dict()
            per_request.append({"endpoint": result.target.name, "load": result.spec.label, **record_dict})
            rows.append(request_row(result, record, record_dict))
    requests_path = out_dir / REQUESTS_JSON
    requests_path.write_text(json.dumps(per_request))

    requests_csv = out_dir / REQUESTS_CSV
    with requests_csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=REQUEST_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)

    summary_csv = out_dir / SUMMARY_CSV
    with summary_csv.open("w", newline="") as handle:
        flat = [flatten({"endpoint": run["endpoint"]["name"], "load": run["load"], **run["summary"]}) for run in runs]
        writer = csv.DictWriter(handle, fieldnames=list(flat[0]))
        writer.writeheader()
        writer.writerows(flat)
    return [summary_path, requests_path, requests_csv, summary_csv]


def flatten(nested: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}_"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
