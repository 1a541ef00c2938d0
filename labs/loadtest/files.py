"""REPORTING, data files: summary.json, requests.json, requests.csv and summary.csv in one folder."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from labs.loadtest.aggregate import DEFINITIONS, Summary
from labs.loadtest.runner import RunResult

SUMMARY_JSON = "summary.json"
REQUESTS_JSON = "requests.json"
REQUESTS_CSV = "requests.csv"
SUMMARY_CSV = "summary.csv"
REQUEST_COLUMNS = ("endpoint", "load", "request_id", "outcome", "status", "finish_reason", "max_tokens",
                   "prompt_tokens", "output_tokens", "num_chunks", "queue_ms", "ttft_ms", "e2e_ms", "error")


def _finite(value: Any) -> Any:
    """JSON has no NaN: a metric with no sample is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def run_dict(result: RunResult, summary: Summary) -> dict[str, Any]:
    spec = asdict(result.spec)
    spec.pop("prompts")
    return {
        "endpoint": {"name": result.target.name, "api_url": result.target.api_url, "model": result.target.model},
        "load": result.spec.label,
        "load_value": result.spec.load_value,
        "workload": spec,
        "summary": summary.to_dict(),
        "metrics_note": result.metrics_note,
        "served_by_replica": result.served_by_replica,  # behind the kit's router; {} otherwise
        "metrics_peaks": result.metrics_peaks,
        "metrics_series": [{"t_s": snapshot.taken_s - result.started_s, "running": snapshot.running,
                            "waiting": snapshot.waiting, "kv_usage": snapshot.kv_usage,
                            "preemptions_total": snapshot.preemptions_total, "format": snapshot.format}
                           for snapshot in result.snapshots],
    }


def request_row(result: RunResult, record_dict: dict[str, Any]) -> dict[str, Any]:
    def ms(end: str) -> float | None:
        start, stop = record_dict["sent_s"], record_dict[end]
        return None if stop is None or not start else round((stop - start) * 1000.0, 3)

    sent_s = record_dict["sent_s"]
    queue_ms = round((sent_s - record_dict["scheduled_s"]) * 1000.0, 3) if sent_s else None
    return {"endpoint": result.target.name, "load": result.spec.label, "request_id": record_dict["request_id"],
            "outcome": record_dict["outcome"], "status": record_dict["status"],
            "finish_reason": record_dict["finish_reason"], "max_tokens": record_dict["max_tokens"],
            "prompt_tokens": record_dict["prompt_tokens"], "output_tokens": record_dict["output_tokens"],
            "num_chunks": len(record_dict["chunk_times_s"]), "queue_ms": queue_ms,
            "ttft_ms": ms("first_token_s"), "e2e_ms": ms("done_s"), "error": record_dict["error"]}


def write_data(out_dir: Path, results: Sequence[tuple[RunResult, Summary]]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [run_dict(result, summary) for result, summary in results]
    summary_path = out_dir / SUMMARY_JSON
    summary_path.write_text(json.dumps(_finite({"definitions": DEFINITIONS, "runs": runs}), indent=2))

    per_request = []
    rows = []
    for result, _ in results:
        for record in result.records:
            record_dict = record.to_dict()
            per_request.append({"endpoint": result.target.name, "load": result.spec.label, **record_dict})
            rows.append(request_row(result, record_dict))
    requests_path = out_dir / REQUESTS_JSON
    requests_path.write_text(json.dumps(per_request))

    requests_csv = out_dir / REQUESTS_CSV
    with requests_csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=REQUEST_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)

    summary_csv = out_dir / SUMMARY_CSV
    with summary_csv.open("w", newline="") as handle:
        flat = [flatten({"endpoint": run["endpoint"]["name"], "load": run["load"], **run["summary"]})
                for run in runs]
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
