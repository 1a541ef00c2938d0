"""The load test as one function: the engines and the load points in, every run with its summary out, the report
written. `python -m labs.loadtest` builds a `LoadTest` from its command line; the tour builds one from its sizes.

The engines are checked before anything is sent (`UsageError` or `EndpointError`: nothing measured); an engine's
failures during the load are records, never exceptions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from client.endpoint import Endpoint
from labs.loadtest.aggregate import Summary, summarize
from labs.loadtest.console import console, progress_bar, results_table
from labs.loadtest.files import run_dict, write_data
from labs.loadtest.html_report import write_html
from labs.loadtest.plots import write_plots
from labs.loadtest.runner import SCRAPE_INTERVAL_S, RunResult, run_load
from labs.loadtest.workload import WorkloadSpec, parse_lengths
from labs.results import Envelope, MeasuredEngine
from labs.served import replica_urls, wait_for_compiled

WARMUP_MAX_TOKENS = 8


class UsageError(ValueError):
    """Bad input or an unusable engine; the message says what to change."""


@dataclass(frozen=True, slots=True)
class LoadTest:
    """What to load, how, and where the report goes. `command` is how to run it again (the results' envelope)."""

    targets: Sequence[Endpoint]
    specs: Sequence[WorkloadSpec]
    out: Path
    command: str
    warmup: int = 1  # untimed requests per engine before its first load point
    scrape_interval_s: float | None = SCRAPE_INTERVAL_S  # None: no /metrics series

    def __post_init__(self) -> None:
        if not self.targets or not self.specs:
            raise UsageError("a load test needs at least one engine and one load point")
        if self.warmup < 0:
            raise UsageError(f"--warmup {self.warmup} is invalid: give 0 or more requests")


@dataclass(frozen=True, slots=True)
class LoadReport:
    """Every (engine, load point) run in the order they ran, and the files the report was written to."""

    runs: list[tuple[RunResult, Summary]]
    envelope: Envelope
    paths: list[Path]

    @property
    def run_dicts(self) -> list[dict[str, Any]]:
        """The runs as summary.json holds them."""
        return [run_dict(result, summary) for result, summary in self.runs]


def checked(endpoint: Endpoint) -> Endpoint:
    """The endpoint once /v1/models shows its model (with the first one listed when none was named), and behind the
    kit's router its replicas (whose /metrics the series reads)."""
    endpoint = replace(endpoint, replica_urls=endpoint.replica_urls or replica_urls(endpoint.base_url))
    wait_for_compiled(endpoint.base_url, "The load test")
    if endpoint.model:
        endpoint.check()
        return endpoint
    served = endpoint.models()
    if not served:
        raise UsageError(f"{endpoint.base_url} lists no model: add @MODEL to --endpoint {endpoint.name}=...")
    return replace(endpoint, model=served[0].id)


def load_test(config: LoadTest) -> LoadReport:
    """Check every engine, then each load point on each engine in turn (after its warm-up), shown as it goes;
    then the table, the notes and the report's files."""
    targets = [checked(endpoint) for endpoint in config.targets]
    runs: list[tuple[RunResult, Summary]] = []
    for target in targets:
        if config.warmup > 0:  # the first connection and the engine's first batch are not part of the load
            warm_up = WorkloadSpec(
                num_requests=config.warmup,
                rate_rps=None,
                concurrency=1,
                lengths=parse_lengths(f"fixed:{WARMUP_MAX_TOKENS}"),
            )
            asyncio.run(run_load(target, warm_up, scrape_interval_s=None))
        for spec in config.specs:
            with progress_bar(f"{target.name} · {spec.label}", spec.num_requests) as on_done:
                result = asyncio.run(run_load(target, spec, on_done, config.scrape_interval_s))
            runs.append((result, summarize(result.records)))
    show(runs)
    # an engine that exposes vLLM's /metrics names is a vLLM; nothing else here tells the kind for sure
    with_vllm_metrics = {result.target.name for result, _ in runs if result.snapshots}
    name_to_target = {result.target.name: result.target for result, _ in runs}
    envelope = Envelope.now(
        config.command,
        [
            MeasuredEngine(target.model, target.root_url, "vllm" if name in with_vllm_metrics else None)
            for name, target in name_to_target.items()
        ],
    )
    data_paths = write_data(config.out, runs, envelope)
    plots = write_plots(config.out, runs)
    page = write_html(config.out, runs, plots, envelope)
    paths = [*data_paths, *(plot.path for plot in plots), page]
    for path in paths:
        console.print(f"wrote {path}")
    return LoadReport(runs, envelope, paths)


def show(runs: Sequence[tuple[RunResult, Summary]]) -> None:
    """The table, then what needs saying of a run: no /metrics, the replicas that served it, its failures."""
    console.print(results_table(runs))
    notes = {result.target.name: result.metrics_note for result, _ in runs if result.metrics_note}
    for name, note in notes.items():
        console.print(f"[yellow]note[/yellow] {name}: {note}")
    for result, _ in runs:
        if result.served_by_replica:
            spread = ", ".join(f"{url} {count:g}" for url, count in result.served_by_replica.items())
            console.print(
                f"served by replica at {result.target.name} · {result.spec.label}: {spread} "
                "(their own request counters; the router names none per request)"
            )
    for result, summary in runs:
        errors = [record.error for record in result.records if record.error]
        if errors:
            console.print(
                f"[red]{summary.num_failed} failed[/red] at {result.target.name} · {result.spec.label}; "
                f"the first said: {errors[0][:200]}"
            )
