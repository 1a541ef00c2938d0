"""Prediction against a running vLLM (labs/served.py): its `vllm:cache_config_info` labels and its startup log line."""

from __future__ import annotations

from dataclasses import dataclass

from labs.served import Served
from serve.config.sizing import KV_DTYPE_BYTES, GiB, ModelFacts, SizingError, kv_pool
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
    if "kv_cache_max_concurrency" in config and engine.max_model_len:
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


def reported_kv_dtype(facts: ModelFacts, cache_config: dict[str, str]) -> tuple[str, str]:
    """The KV dtype an engine's own figures imply, for one the kit did not start: its budget over its blocks gives
    the bytes of one token's K and V; divided by the model's layers x KV heads x head_dim x 2, the bytes of one
    element (4: float32, 2: a 16-bit type, 1: fp8). SizingError when /metrics lacks the figures."""
    try:
        budget = int(cache_config["kv_cache_memory_bytes"])
        tokens = int(cache_config["num_gpu_blocks"]) * int(cache_config["block_size"])
    except (KeyError, ValueError):
        raise SizingError(
            "the engine reports no KV budget and blocks on /metrics to infer its KV dtype from: pass --dtype"
        ) from None
    element_bytes = budget // max(1, tokens) // facts.kv_bytes_per_token("fp8")
    names = {bytes_: name for name, bytes_ in KV_DTYPE_BYTES.items() if name != "float16"}
    if element_bytes not in names:
        raise SizingError(
            f"/metrics implies {element_bytes} bytes per KV element, no dtype the kit knows: pass --dtype"
        )
    return names[element_bytes], (
        f"/metrics: kv_cache_memory_bytes / (num_gpu_blocks x block_size) = {budget // max(1, tokens):,} bytes a "
        f"token, {element_bytes} per element"
    )


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a prediction of the engine's pool starts from, and where each came from."""

    facts: ModelFacts
    dtype: str
    dtype_source: str
    kv_budget_bytes: int
    source: str  # where the engine's settings came from (Served.source)


def inputs(
    engine: Served, model: ModelFacts | None = None, dtype: str | None = None, kv_gib: float | None = None
) -> Inputs:
    """The model, dtype and KV budget the engine runs with, as recorded by `up` (or, for an engine the kit did not
    start, as it reports them); `model`, `dtype` and `kv_gib` given by the caller override each. SizingError names
    what is missing."""
    facts = model or engine.model_facts
    if facts is None:
        raise SizingError(
            f"the model {engine.base_url} serves is not known here (no record of the kit starting it, and "
            "/v1/models names no local folder): pass --model with its folder or config.json"
        )
    dtype_source = "--dtype" if dtype else engine.source
    dtype = dtype or engine.dtype
    if dtype is None:
        dtype, dtype_source = reported_kv_dtype(facts, engine.cache_config)
    budget = int(kv_gib * GiB) if kv_gib is not None else engine.kv_budget_bytes
    if budget is None:  # a GPU engine: its pool is GPU memory's
        raise SizingError(f"no KV budget to compare against ({engine.source} names none): pass --kv-gib")
    return Inputs(facts, dtype, dtype_source, budget, engine.source)
