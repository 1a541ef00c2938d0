"""Reading an engine's Prometheus `/metrics`: one snapshot type for vLLM V0 and V1 names.

The one implementation shared by `python -m serve status`, the doctor, the sizing lab and the load tester. It sits
on serve's floor, beside health.py (the other reading of what an engine says about itself), so that `status` may read
it: serve imports nothing of client/ or labs/. Parsing is prometheus_client's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"  # V1: reason="capacity"|"deferred"
KV_USAGE_V1 = "vllm:kv_cache_usage_perc"  # V1 (>= 0.10)
KV_USAGE_V0 = "vllm:gpu_cache_usage_perc"  # V0 (0.9.1, the openEuler image); the CPU pool on CPU
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
CACHE_CONFIG = "vllm:cache_config_info"
SUCCESS = "vllm:request_success_total"  # requests finished, by finish reason: who served how many
STEPS = "vllm:iteration_tokens_total_count"  # a histogram observed once per engine step: its count is the steps
GENERATED = "vllm:generation_tokens_total"


class NoMetrics(Exception):
    """The engine answers but exposes no Prometheus /metrics (Ollama, llama.cpp's Python server)."""


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """The gauges that say which lever to pull, at one moment. KV usage is a fraction 0..1."""

    taken_s: float
    running: float
    waiting: float
    kv_usage: float | None
    preemptions_total: float
    waiting_by_reason: dict[str, float] = field(default_factory=dict)
    prefix_queries_total: float | None = None
    prefix_hits_total: float | None = None
    cache_config: dict[str, str] = field(default_factory=dict)
    format: str = "v1"  # "v0" when only the V0 names were present
    requests_done_total: float = 0.0
    engine_steps_total: float = 0.0
    generation_tokens_total: float = 0.0


def combine(snapshots: list[MetricsSnapshot]) -> MetricsSnapshot:
    """Several replicas as one engine: counts and totals add up; KV usage is the mean of the replicas' pools
    (equal pools: the share of all KV blocks in use); the cache config is the first replica's."""

    def total(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return sum(known) if known else None

    kv = [snapshot.kv_usage for snapshot in snapshots if snapshot.kv_usage is not None]
    reasons: dict[str, float] = {}
    for snapshot in snapshots:
        for reason, value in snapshot.waiting_by_reason.items():
            reasons[reason] = reasons.get(reason, 0.0) + value
    return MetricsSnapshot(
        taken_s=max(snapshot.taken_s for snapshot in snapshots),
        running=sum(snapshot.running for snapshot in snapshots),
        waiting=sum(snapshot.waiting for snapshot in snapshots),
        kv_usage=sum(kv) / len(kv) if kv else None,
        preemptions_total=sum(snapshot.preemptions_total for snapshot in snapshots),
        waiting_by_reason=reasons,
        prefix_queries_total=total([snapshot.prefix_queries_total for snapshot in snapshots]),
        prefix_hits_total=total([snapshot.prefix_hits_total for snapshot in snapshots]),
        cache_config=snapshots[0].cache_config,
        format=snapshots[0].format,
        requests_done_total=sum(snapshot.requests_done_total for snapshot in snapshots),
        engine_steps_total=sum(snapshot.engine_steps_total for snapshot in snapshots),
        generation_tokens_total=sum(snapshot.generation_tokens_total for snapshot in snapshots),
    )


def parse(text: str, taken_s: float | None = None) -> MetricsSnapshot:
    """Sum each metric over its label sets (one engine, one model in the usual case)."""
    totals: dict[str, float] = {}
    by_reason: dict[str, float] = {}
    cache_config: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
            if sample.name == WAITING_BY_REASON and "reason" in sample.labels:
                reason = sample.labels["reason"]
                by_reason[reason] = by_reason.get(reason, 0.0) + sample.value
            if sample.name == CACHE_CONFIG:
                cache_config = {
                    key: value for key, value in sample.labels.items() if key not in ("model_name", "engine")
                }
    kv_name = KV_USAGE_V1 if KV_USAGE_V1 in totals else KV_USAGE_V0
    return MetricsSnapshot(
        taken_s=time.perf_counter() if taken_s is None else taken_s,
        running=totals.get(RUNNING, 0.0),
        waiting=totals.get(WAITING, 0.0),
        kv_usage=totals.get(kv_name),
        preemptions_total=totals.get(PREEMPTIONS, 0.0),
        waiting_by_reason=by_reason,
        prefix_queries_total=totals.get(PREFIX_QUERIES),
        prefix_hits_total=totals.get(PREFIX_HITS),
        cache_config=cache_config,
        format="v1" if kv_name == KV_USAGE_V1 else "v0",
        requests_done_total=totals.get(SUCCESS, 0.0),
        engine_steps_total=totals.get(STEPS, 0.0),
        generation_tokens_total=totals.get(GENERATED, 0.0),
    )


def scrape(base_url: str, timeout_s: float = 5.0) -> MetricsSnapshot:
    """GET {base_url}/metrics (base_url without /v1). Raises NoMetrics when there is no Prometheus text."""
    return snapshot_of(base_url, httpx.get(f"{base_url}/metrics", timeout=timeout_s))


async def scrape_async(http: httpx.AsyncClient, base_url: str) -> MetricsSnapshot:
    """`scrape` on an event loop, through the caller's client (its timeouts)."""
    return snapshot_of(base_url, await http.get(f"{base_url}/metrics"))


def snapshot_of(base_url: str, response: httpx.Response) -> MetricsSnapshot:
    """The snapshot in an answer to GET {base_url}/metrics; NoMetrics when it holds no vLLM gauges."""
    if response.status_code == httpx.codes.NOT_FOUND:
        raise NoMetrics(f"{base_url} exposes no vLLM /metrics (HTTP {response.status_code})")
    response.raise_for_status()  # a 5xx is trouble in an engine that has metrics, not their absence
    if RUNNING not in response.text:
        raise NoMetrics(f"{base_url}/metrics answers, but not with vLLM's gauges")
    return parse(response.text)
