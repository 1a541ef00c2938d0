"""Prediction against a running vLLM: its `vllm:cache_config_info` labels and its startup log line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from client.endpoint import Endpoint, EndpointError
from client.metrics import scrape
from serve.config.sizing import GiB, ModelFacts, kv_pool
from serve.processes.health import kv_cache_report

CONCURRENCY_DECIMALS = 2  # vLLM's startup log prints the concurrency with two decimals


@dataclass(frozen=True, slots=True)
class Comparison:
    quantity: str
    source: str  # where vLLM said it: "/metrics" or the log file
    predicted: str
    reported: str

    @property
    def matches(self) -> bool:
        return self.predicted == self.reported


@dataclass(frozen=True, slots=True)
class Served:
    """What the running engine says about its cache."""

    cache_config: dict[str, str]
    max_model_len: int
    log_text: str | None


def served(base_url: str, log_path: Path | None = None, timeout_s: float = 10.0) -> Served:
    """What the engine at `base_url` (without /v1) reports: EndpointError when it cannot be reached (the models
    check comes first for its one-line error), NoMetrics when it is not a vLLM."""
    models = Endpoint.at("engine", f"{base_url}/v1", url_source="--url").models(timeout_s)
    snapshot = scrape(base_url, timeout_s)
    max_model_len = models[0].max_model_len
    if max_model_len is None:  # vLLM lists it; an engine with /metrics but not this field is not one
        raise EndpointError(f"{base_url}/v1/models lists no max_model_len: point --url at a vLLM server")
    log_text = log_path.read_text(errors="replace") if log_path is not None and log_path.exists() else None
    return Served(snapshot.cache_config, max_model_len, log_text)


def _concurrency(value: float) -> str:
    return f"{value:.{CONCURRENCY_DECIMALS}f}"


def compare(facts: ModelFacts, kv_dtype: str, kv_budget_bytes: int, engine: Served) -> list[Comparison]:
    """Predict from the model, dtype, KV budget and the engine's block size; pair each with what vLLM said."""
    config = engine.cache_config
    budget = kv_budget_bytes
    pool = kv_pool(facts, kv_dtype, budget, int(config["block_size"]))
    rows = [
        Comparison(
            "KV budget (GiB)",
            "/metrics",
            f"{budget / GiB:g}",
            f"{int(config['kv_cache_memory_bytes']) / GiB:g}" if "kv_cache_memory_bytes" in config else "-",
        ),
        Comparison("blocks", "/metrics", str(pool.num_blocks), config.get("num_gpu_blocks", "-")),
        Comparison("block size (tokens)", "/metrics", str(pool.block_size), config["block_size"]),
    ]
    if "kv_cache_size_tokens" in config:
        rows.append(Comparison("KV tokens", "/metrics", str(pool.num_tokens), config["kv_cache_size_tokens"]))
    if "kv_cache_max_concurrency" in config:
        rows.append(
            Comparison(
                f"max concurrency at {engine.max_model_len:,}",
                "/metrics",  # the label is exact
                f"{pool.max_concurrency(engine.max_model_len):g}",
                f"{float(config['kv_cache_max_concurrency']):g}",
            )
        )
    report = kv_cache_report(engine.log_text) if engine.log_text else None
    if report is not None:
        rows.append(Comparison("KV tokens", "startup log", str(pool.num_tokens), str(report.tokens)))
        rows.append(
            Comparison(
                f"max concurrency at {report.max_model_len:,}",
                "startup log",
                _concurrency(pool.max_concurrency(report.max_model_len)),
                _concurrency(report.max_concurrency),
            )
        )
    return rows
