"""What runs at a URL, as every lab and benchmark reads it: the record `up` wrote when the kit started the engine there
(serve/processes/run_record.py), else what the engine reports about itself, and which of the two it was.

The one reader of "what runs here". The doctor, `labs.sizing verify`, the tour and the benchmarks never resolve the
settings again once an engine is up: that would answer with the machine, the model and the `.env` of now, not with
what the engine was started with. For an engine the kit did not start (another vLLM, an Ollama, a record removed)
there is no plan: its numbers are what it reports (/metrics `vllm:cache_config_info`: block size, blocks, the KV
budget; /v1/models: max_model_len and the folder it loaded), and `source` says so, in words a report prints.
vLLM reports no max_num_seqs: without a record it is unknown, and said to be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from client.endpoint import Endpoint, EndpointError
from serve.config.plan import Plan
from serve.config.sizing import GiB, ModelFacts, SizingError, load_model_facts
from serve.config.vllm_flags import API_SERVER_MODULE
from serve.engines import hand_over
from serve.processes import run_record
from serve.processes.metrics import NoMetrics, scrape
from serve.processes.run_record import RunRecord

DEFAULT_TIMEOUT_S = 10.0
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")
REPORTED = "what the engine reports (/metrics vllm:cache_config_info, /v1/models)"


@dataclass(frozen=True, slots=True)
class Served:
    """The engine at `base_url`: its record when the kit started it (None otherwise) and what it reports now."""

    base_url: str  # without /v1
    record: RunRecord | None
    cache_config: dict[str, str] = field(default_factory=dict)  # empty: no vLLM /metrics
    max_model_len: int | None = None  # /v1/models (vLLM lists it)
    model_root: str = ""  # /v1/models' root: the folder vLLM loaded
    log_text: str | None = None  # the engine's log, when the kit keeps it

    @property
    def source(self) -> str:
        """Where the plan's numbers come from, for a report: the record, or what the engine reports."""
        if self.record is not None:
            return f"the record up wrote when it started this engine ({self.record.path})"
        return f"{REPORTED}: no record of the kit starting an engine on port {port_of(self.base_url)}"

    @property
    def plan(self) -> Plan | None:
        return self.record.plan if self.record is not None else None

    @property
    def max_num_seqs(self) -> int | None:
        """The batch cap it runs with; None when unknown (no record: vLLM does not report it) or left to vLLM."""
        return self.plan.max_num_seqs if self.plan is not None else None

    @property
    def dtype(self) -> str | None:
        return self.plan.dtype if self.plan is not None else None

    @property
    def kv_budget_bytes(self) -> int | None:
        """The KV budget: the plan's, else what /metrics reports (vLLM's CPU backend reports VLLM_CPU_KVCACHE_SPACE
        as kv_cache_memory_bytes), else None."""
        if self.plan is not None and self.plan.kv_cache_space_gib is not None:
            return self.plan.kv_cache_space_gib * GiB
        reported = self.cache_config.get("kv_cache_memory_bytes", "")
        return int(reported) if reported.isdigit() else None

    @property
    def kv_cache_space_gib(self) -> float | None:
        budget = self.kv_budget_bytes
        return None if budget is None else budget / GiB

    @property
    def model_facts(self) -> ModelFacts | None:
        """The served checkpoint's facts: the record's, else the folder /v1/models names when it is on this machine."""
        if self.record is not None and self.record.model_facts is not None:
            return self.record.model_facts
        if self.model_root and Path(self.model_root, "config.json").is_file():
            try:
                return load_model_facts(self.model_root)
            except SizingError:
                return None
        return None

    def replicas(self) -> list[RunRecord]:
        """Behind the kit's router: the live records of its replicas (their plans add up); else none."""
        ports = self.record.replica_ports if self.record is not None else ()
        return [record for port in ports if (record := run_record.live(port)) is not None]


def port_of(base_url: str) -> int | None:
    parts = urlsplit(base_url)
    return parts.port or {"http": 80, "https": 443}.get(parts.scheme)


def record_at(base_url: str) -> RunRecord | None:
    """The live record of what the kit started at `base_url` (a port of this machine); None for anything else."""
    parts, port = urlsplit(base_url), port_of(base_url)
    if port is None or parts.hostname is None:
        return None
    record = run_record.live(port)
    if record is None:
        return None
    recorded = urlsplit(record.base_url).hostname
    same_host = parts.hostname == recorded or (parts.hostname in LOOPBACK and recorded in LOOPBACK)
    return record if same_host else None


def replica_urls(base_url: str) -> tuple[str, ...]:
    """The replicas' server roots when the kit's router runs at `base_url` (its record lists them); else none."""
    record = record_at(base_url.rstrip("/").removesuffix("/v1"))
    if record is None:
        return ()
    return tuple(replica.base_url for port in record.replica_ports if (replica := run_record.live(port)) is not None)


def wait_for_compiled(base_url: str, what: str) -> float:
    """Before a measurement: while the kit's eager engine answers at `base_url` until the compiled one takes over
    (SERVE_WHILE_COMPILING, serve/engines/hand_over.py), wait for the compiled one; the seconds waited."""
    parts, port = urlsplit(base_url), port_of(base_url)
    if port is None or parts.hostname not in LOOPBACK:
        return 0.0
    return hand_over.wait_for_compiled(port, API_SERVER_MODULE, what)


def served(
    base_url: str,
    endpoint: Endpoint | None = None,
    log_path: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    require_metrics: bool = True,
    require_models: bool = True,
) -> Served:
    """What runs at `base_url` (without /v1). EndpointError when it cannot be reached (the models check comes first,
    for its one-line error; unless not `require_models`: then an engine without /v1/models has no max_model_len);
    NoMetrics when it has no vLLM /metrics and `require_metrics` (else an empty cache config).
    `endpoint`: how to reach it (its key); by default the URL with the key the settings route to it. `log_path`: the
    log to read when the kit did not start it (a record names its own)."""
    base_url = base_url.rstrip("/").removesuffix("/v1")
    wait_for_compiled(base_url, "Reading what runs there")
    endpoint = endpoint or Endpoint.at("engine", f"{base_url}/v1", url_source="--url")
    try:
        models = endpoint.models(timeout_s)
    except EndpointError:
        if require_models:
            raise
        models = []
    try:
        cache_config = scrape(base_url, timeout_s).cache_config
    except NoMetrics:
        if require_metrics:
            raise
        cache_config = {}
    record = record_at(base_url)
    log = Path(record.log_path) if record is not None and record.log_path else log_path
    log_text = log.read_text(errors="replace") if log is not None and log.is_file() else None
    first = models[0] if models else None
    return Served(
        base_url,
        record,
        cache_config,
        first.max_model_len if first else None,
        first.root if first else "",
        log_text,
    )
