"""MEASURE: each section calls its labs' own functions with its sizes and keeps what the report needs of their
results.

Every lab writes its usual results (in the kit's envelope) under the tour's folder and returns what it wrote; a
section's data is what the report needs of that (kept in tour.json, so a recorded tour can be reported again
without an engine). Nothing here measures by itself: the numbers are the labs'. A lab's error (bad input, an
engine that stopped answering) is the section's error line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from client.endpoint import Endpoint
from labs.compare.lab import Comparison, compare, engine_settings
from labs.contract.lab import Contract, check_contract
from labs.doctor.__main__ import TREND_WINDOW
from labs.doctor.diagnosis import Limits, diagnose
from labs.engine.study import load_study
from labs.loadtest.lab import LoadTest, load_test
from labs.loadtest.workload import WorkloadSpec, parse_lengths
from labs.quantization.lab import Quality, score, weights
from labs.served import Served, served
from labs.sizing.verify import compare as sizing_compare
from labs.sizing.verify import inputs as sizing_inputs
from labs.tour.engines import ExtraVllm, KitEngines
from labs.tour.outline import Section
from labs.tour.running import LabFailed, run
from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.config.sizing import GiB, SizingError
from serve.processes.metrics import MetricsSnapshot

TEACHING_PYTHON = ROOT / ".kit" / "vllm" / "bin" / "python"  # the teaching engine needs torch: the vLLM venv's
ENGINE_TIMEOUT_S = 1200
SCRAPE_INTERVAL_S = 0.25  # /metrics samples: a quick load point lasts seconds


@dataclass(frozen=True, slots=True)
class Context:
    """What every section needs: where to write, the settings, the engines the tour holds, how to say it ran."""

    folder: Path
    settings: Settings
    engines: KitEngines
    command: str  # the tour's own command line: the envelope of every lab's results it writes
    measured: dict[Section, dict[str, Any]] = field(default_factory=dict)  # the sections done so far, their data

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.folder))

    def beside(self) -> list[Endpoint]:
        """vLLM and the engine beside it, started if they do not answer."""
        started = self.engines.ensure(self.engines.beside.kit_engines)
        return started if self.engines.beside.endpoint is None else [*started, self.engines.beside.endpoint]


@dataclass(frozen=True, slots=True)
class SeedSizes:
    n: int  # matched requests, one after another and all at once
    max_tokens: int


def seed(ctx: Context, sizes: SeedSizes) -> dict[str, Any]:
    folder = ctx.folder / "compare"
    config = Comparison(ctx.beside(), folder, ctx.command, sizes.n, sizes.max_tokens, engine_settings(ctx.settings))
    compared = compare(config)
    return {
        **seed_data(compared.document),
        "results": ctx.relative(compared.paths[0]),
        "beside": {"name": ctx.engines.beside.name, "described": ctx.engines.beside.described},
    }


def seed_data(document: dict[str, Any]) -> dict[str, Any]:
    """What the report needs of the comparison lab's results."""
    return {
        "n": document["config"]["n"],
        "max_tokens": document["config"]["max_tokens"],
        "summaries": document["summaries"],
        "scaling": document["scaling"],
    }


def sizing(ctx: Context) -> dict[str, Any]:
    """The sizing lab's prediction of vLLM's pool against what the running vLLM reports (`labs.sizing verify`), from
    what it was started with (the record `up` wrote)."""
    return sizing_data(served(ctx.settings.base_url))


def sizing_data(engine: Served) -> dict[str, Any]:
    try:
        given = sizing_inputs(engine)
    except SizingError as exc:
        raise LabFailed(str(exc)) from None
    rows = sizing_compare(given.facts, given.dtype, given.kv_budget_bytes, engine)
    return {
        "dtype": given.dtype,
        "kv_gib": given.kv_budget_bytes / GiB,
        "max_model_len": engine.max_model_len,
        "max_num_seqs": engine.max_num_seqs,
        "source": engine.source,
        "cache_config": engine.cache_config,
        "rows": [{**asdict(row), "matches": row.matches} for row in rows],
    }


@dataclass(frozen=True, slots=True)
class StudySizes:
    """The teaching engine's study: requests arriving at `rate` per second, short and long answers, max batches."""

    requests: int
    rate: float
    batches: tuple[int, ...]
    short_tokens: int
    long_tokens: int


def teaching_study(ctx: Context, sizes: StudySizes) -> dict[str, Any]:
    """The teaching engine's seed study (`labs.engine.experiment`, in the vLLM venv: it needs torch, so it is a
    command of that venv's python, not a call)."""
    if not TEACHING_PYTHON.exists():
        raise LabFailed(
            f"the teaching engine needs torch, which only the native runtime's venv has ({TEACHING_PYTHON} is "
            "missing): run RUNTIME=native bash up.sh once"
        )
    out = ctx.folder / "engine" / "study.json"
    argv = [str(TEACHING_PYTHON), "-m", "labs.engine.experiment", "--requests", str(sizes.requests)]
    argv += ["--rate", f"{sizes.rate:g}", "--batches", ",".join(map(str, sizes.batches))]
    argv += ["--short-tokens", str(sizes.short_tokens), "--long-tokens", str(sizes.long_tokens)]
    run([*argv, "--out", str(out)], timeout_s=ENGINE_TIMEOUT_S)
    study = load_study(out)
    return {"args": study.args, "results": [asdict(row) for row in study.results], "results_file": ctx.relative(out)}


def paging(ctx: Context, sizes: StudySizes) -> dict[str, Any]:
    """vLLM's pool (sizing) and the teaching engine's KV at its peak; one failing part leaves the other."""
    data: dict[str, Any] = {}
    parts = (("vllm", lambda: sizing(ctx)), ("study", lambda: teaching_study(ctx, sizes)))
    for key, part in parts:
        try:
            data[key] = part()
        except Exception as exc:  # a part's failure is reported in its section; the tour goes on
            data[f"{key}_error"] = str(exc) or exc.__class__.__name__
    if not ("vllm" in data or "study" in data):
        raise LabFailed(f"{data['vllm_error']}; {data['study_error']}")
    return data


def batching(ctx: Context, _sizes: None) -> dict[str, Any]:
    """The same study as paging's (one run of the experiment gives both sections)."""
    paging_data = ctx.measured.get(Section.PAGING)
    if paging_data is None or "study" not in paging_data:
        why = (paging_data or {}).get("study_error", "the paging section did not run")
        raise LabFailed(f"no study from the teaching engine: {why}")
    return paging_data["study"]


def snapshots(series: list[dict[str, Any]]) -> list[MetricsSnapshot]:
    """The load tester's /metrics series back as the doctor reads it."""
    return [
        MetricsSnapshot(
            taken_s=point["t_s"],
            running=point["running"],
            waiting=point["waiting"],
            kv_usage=point["kv_usage"],
            preemptions_total=point["preemptions_total"],
        )
        for point in series
    ]


def doctor_reading(series: list[dict[str, Any]], limits: Limits) -> dict[str, Any] | None:
    """What the doctor says at the busiest moment (most running + waiting) of a load point, from the samples
    before it (the doctor's own trend window)."""
    history = snapshots(series)
    if not history:
        return None
    busiest = max(range(len(history)), key=lambda index: history[index].running + history[index].waiting)
    diagnosis = diagnose(history[max(0, busiest + 1 - TREND_WINDOW) : busiest + 1], limits)
    return {
        "state": diagnosis.state,
        "lever": diagnosis.lever,
        "advice": diagnosis.advice,
        "at_s": series[busiest]["t_s"],
    }


@dataclass(frozen=True, slots=True)
class LoadSizes:
    rates: tuple[float, ...]  # arrivals per second, one load point each
    requests: int  # per load point
    lengths: str  # the answers' lengths, as labs.loadtest --lengths takes them


def load(ctx: Context, sizes: LoadSizes) -> dict[str, Any]:
    (vllm,) = ctx.engines.ensure(["vllm"])
    lengths = parse_lengths(sizes.lengths)
    specs = [WorkloadSpec(num_requests=sizes.requests, rate_rps=rate, lengths=lengths) for rate in sizes.rates]
    report = load_test(
        LoadTest([vllm], specs, ctx.folder / "loadtest", ctx.command, scrape_interval_s=SCRAPE_INTERVAL_S)
    )
    limits = Limits.of(served(vllm.root_url, vllm, require_metrics=False))  # what it runs with, as the doctor reads it
    return {
        **load_data(report.run_dicts, limits, sizes.lengths),
        "limits": {"max_num_seqs": limits.max_num_seqs, "max_model_len": limits.max_model_len},
        "limits_source": limits.source,
        "results": ctx.relative(report.paths[0]),
    }


def load_data(runs: Sequence[dict[str, Any]], limits: Limits, lengths: str) -> dict[str, Any]:
    """The load tester's runs (as summary.json holds them), each point with the doctor's reading of its series."""
    points = [
        {
            "rate": run_["load_value"],
            "summary": run_["summary"],
            "peaks": run_["metrics_peaks"],
            "series": run_["metrics_series"],
            "metrics_note": run_["metrics_note"],
            "doctor": doctor_reading(run_["metrics_series"], limits),
        }
        for run_ in runs
    ]
    return {"lengths": lengths, "points": points}


@dataclass(frozen=True, slots=True)
class QuantizationSizes:
    windows: int  # perplexity windows of 1,000 tokens (the text has 24)
    users: tuple[int, ...]  # the speed runs' closed-loop users, one load point each
    requests: int  # per load point
    lengths: str  # the answers' lengths, as labs.loadtest --lengths takes them


def quantization(ctx: Context, sizes: QuantizationSizes) -> dict[str, Any]:
    """The quality lab on the float and the int8 weights (the running vLLM and a second one with the other
    weights), then the load tester's tok/s at 1 and many users on both."""
    (vllm,) = ctx.engines.ensure(["vllm"])
    running_kind, _ = weights(served(vllm.root_url, vllm, require_metrics=False))
    other = "none" if "int8" in running_kind else "int8"
    with ExtraVllm(other) as extra:
        second = dataclasses.replace(vllm, base_url=f"http://127.0.0.1:{extra.port}/v1", replica_urls=())
        float_engine, int8_engine = (second, vllm) if other == "none" else (vllm, second)
        named = [dataclasses.replace(float_engine, name="float"), dataclasses.replace(int8_engine, name="int8")]
        scored = score(Quality(named, ctx.folder / "quantization.json", ctx.command, sizes.windows))
        lengths = parse_lengths(sizes.lengths)
        specs = [
            WorkloadSpec(num_requests=sizes.requests, rate_rps=None, concurrency=users, lengths=lengths)
            for users in sizes.users
        ]
        speed = load_test(
            LoadTest(named, specs, ctx.folder / "quantization-speed", ctx.command, scrape_interval_s=None)
        )
    return {
        **quantization_data(scored.payload, speed.run_dicts),
        "windows": sizes.windows,
        "lengths": sizes.lengths,
        "results": [ctx.relative(scored.path), ctx.relative(speed.paths[0])],
    }


def quantization_data(quality: dict[str, Any], speed_runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The quality lab's rows (float first) with the load tester's tok/s and TTFT p50 per number of users."""
    engines = []
    for label, row in zip(("float", "int8"), quality["engines"], strict=True):
        runs = [run_ for run_ in speed_runs if run_["endpoint"]["name"] == label]
        engines.append(
            {
                "label": label,
                **row,
                "tok_s": {f"{run_['load_value']:g}": run_["summary"]["output_tokens_per_s"] for run_ in runs},
                "ttft_p50_ms": {f"{run_['load_value']:g}": run_["summary"]["ttft_ms"]["median"] for run_ in runs},
            }
        )
    return {"dtype": quality["dtype"], "engines": engines}


@dataclass(frozen=True, slots=True)
class ContractSizes:
    checks: tuple[str, ...] | None  # None: every check


def contract(ctx: Context, sizes: ContractSizes) -> dict[str, Any]:
    config = Contract(ctx.beside(), ctx.folder / "contract", ctx.command, *([sizes.checks] if sizes.checks else []))
    checked = check_contract(config)
    return {**contract_data(checked.payload), "results": ctx.relative(checked.paths[0])}


def contract_data(payload: dict[str, Any]) -> dict[str, Any]:
    """The contract lab's matrix, with every check that did not pass and its evidence."""
    return {
        "engines": payload["engines"],
        "matrix": payload["matrix"],
        "differences": [
            {key: record[key] for key in ("check", "engine", "verdict", "evidence")}
            for record in payload["records"]
            if record["verdict"] != "pass"
        ],
    }
