"""MEASURE: each section runs its labs through their own entry points and keeps what their results files say.

Every lab writes its usual results (in the kit's envelope) under the tour's folder; a section's data is what the
report needs of them, read back through `labs.results.load`, so a recorded tour can be reported again without
an engine. Nothing here measures by itself: the numbers are the labs'.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labs import results
from labs.compare import __main__ as compare_lab
from labs.compare.report import JSON_FILE as COMPARE_JSON
from labs.contract import __main__ as contract_lab
from labs.contract.report import RESULTS_JSON as CONTRACT_JSON
from labs.doctor.__main__ import TREND_WINDOW
from labs.doctor.diagnosis import Limits, diagnose
from labs.engine.study import load_study
from labs.loadtest import __main__ as loadtest_lab
from labs.loadtest.files import SUMMARY_JSON
from labs.quantization import __main__ as quantization_lab
from labs.served import Served, served
from labs.sizing.verify import compare as sizing_compare
from labs.sizing.verify import inputs as sizing_inputs
from labs.tour.engines import ExtraVllm, KitEngines
from labs.tour.plan import Section, Sizes
from labs.tour.running import LabFailed, lab, run
from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.config.sizing import GiB, SizingError
from serve.processes.metrics import MetricsSnapshot

TEACHING_PYTHON = ROOT / ".kit" / "vllm" / "bin" / "python"  # the teaching engine needs torch: the vLLM venv's
ENGINE_TIMEOUT_S = 1200
SCRAPE_INTERVAL_S = 0.25  # /metrics samples: a quick load point lasts seconds


@dataclass(frozen=True, slots=True)
class Context:
    """What every section needs: where to write, how much to ask, the settings and the engines the tour holds."""

    folder: Path
    sizes: Sizes
    settings: Settings
    engines: KitEngines
    measured: dict[Section, dict[str, Any]] = field(default_factory=dict)  # the sections done so far, their data

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.folder))


def seed(ctx: Context) -> dict[str, Any]:
    beside = ctx.engines.beside
    ctx.engines.ensure(beside.kit_engines)
    folder = ctx.folder / "compare"
    sizes = ctx.sizes
    argv = [*beside.lab_args, "--n", str(sizes.compare_n), "--max-tokens", str(sizes.compare_max_tokens)]
    lab("labs.compare", compare_lab.main, [*argv, "--results", str(folder)])
    return {
        **seed_data(folder / COMPARE_JSON),
        "results": ctx.relative(folder / COMPARE_JSON),
        "beside": {"name": beside.name, "described": beside.described},
    }


def seed_data(path: Path) -> dict[str, Any]:
    """What the report needs of the comparison lab's results file."""
    _, payload = results.load(path)
    return {
        "n": payload["config"]["n"],
        "max_tokens": payload["config"]["max_tokens"],
        "summaries": payload["summaries"],
        "scaling": payload["scaling"],
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


def teaching_study(ctx: Context) -> dict[str, Any]:
    """The teaching engine's seed study (`labs.engine.experiment`, in the vLLM venv: it needs torch)."""
    if not TEACHING_PYTHON.exists():
        raise LabFailed(
            f"the teaching engine needs torch, which only the native runtime's venv has ({TEACHING_PYTHON} is "
            "missing): run RUNTIME=native bash up.sh once"
        )
    sizes, out = ctx.sizes, ctx.folder / "engine" / "study.json"
    argv = [str(TEACHING_PYTHON), "-m", "labs.engine.experiment", "--requests", str(sizes.engine_requests)]
    argv += ["--rate", f"{sizes.engine_rate:g}", "--batches", sizes.engine_batches]
    argv += ["--short-tokens", str(sizes.engine_short_tokens), "--long-tokens", str(sizes.engine_long_tokens)]
    run([*argv, "--out", str(out)], timeout_s=ENGINE_TIMEOUT_S)
    study = load_study(out)
    return {"args": study.args, "results": [asdict(row) for row in study.results], "results_file": ctx.relative(out)}


def paging(ctx: Context) -> dict[str, Any]:
    """vLLM's pool (sizing) and the teaching engine's KV at its peak; one failing part leaves the other."""
    data: dict[str, Any] = {}
    for key, part in (("vllm", sizing), ("study", teaching_study)):
        try:
            data[key] = part(ctx)
        except Exception as exc:  # a part's failure is reported in its section; the tour goes on
            data[f"{key}_error"] = str(exc) or exc.__class__.__name__
    if not ("vllm" in data or "study" in data):
        raise LabFailed(f"{data['vllm_error']}; {data['study_error']}")
    return data


def batching(ctx: Context) -> dict[str, Any]:
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


def load(ctx: Context) -> dict[str, Any]:
    (vllm,) = ctx.engines.ensure(["vllm"])
    sizes, folder = ctx.sizes, ctx.folder / "loadtest"
    argv = ["--base-url", vllm.base_url, "--model", vllm.model, "--sweep-rate", sizes.load_rates]
    argv += ["--requests", str(sizes.load_requests), "--lengths", sizes.load_lengths]
    argv += ["--scrape-interval-s", f"{SCRAPE_INTERVAL_S:g}"]
    lab("labs.loadtest", loadtest_lab.main, [*argv, "--out", str(folder)])
    limits = Limits.of(served(vllm.root_url, vllm, require_metrics=False))  # what it runs with, as the doctor reads it
    return {
        **load_data(folder / SUMMARY_JSON, limits, sizes.load_lengths),
        "limits_source": limits.source,
        "results": ctx.relative(folder / SUMMARY_JSON),
    }


def load_data(path: Path, limits: Limits, lengths: str) -> dict[str, Any]:
    """The load tester's summary.json, each point with the doctor's reading of its /metrics series."""
    _, payload = results.load(path)
    points = [
        {
            "rate": run_["load_value"],
            "summary": run_["summary"],
            "peaks": run_["metrics_peaks"],
            "series": run_["metrics_series"],
            "metrics_note": run_["metrics_note"],
            "doctor": doctor_reading(run_["metrics_series"], limits),
        }
        for run_ in payload["runs"]
    ]
    return {"lengths": lengths, "points": points}


def quantization(ctx: Context) -> dict[str, Any]:
    """The quality lab on the float and the int8 weights (the running vLLM and a second one with the other
    weights), then the load tester's tok/s at 1 and many users on both."""
    (vllm,) = ctx.engines.ensure(["vllm"])
    running_kind, _ = quantization_lab.weights(served(vllm.root_url, vllm, require_metrics=False))
    other = "none" if "int8" in running_kind else "int8"
    sizes = ctx.sizes
    with ExtraVllm(other) as extra:
        second = f"http://127.0.0.1:{extra.port}/v1"
        float_url, int8_url = (second, vllm.base_url) if other == "none" else (vllm.base_url, second)
        out = ctx.folder / "quantization.json"
        argv = ["--url", float_url, "--url", int8_url, "--windows", str(sizes.quality_windows), "--out", str(out)]
        lab("labs.quantization", quantization_lab.main, argv)
        folder = ctx.folder / "quantization-speed"
        argv = ["--endpoint", f"float={float_url}@{vllm.model}", "--endpoint", f"int8={int8_url}@{vllm.model}"]
        argv += ["--sweep-concurrency", sizes.speed_users, "--requests", str(sizes.speed_requests)]
        argv += ["--lengths", sizes.speed_lengths, "--scrape-interval-s", "0"]
        lab("labs.loadtest", loadtest_lab.main, [*argv, "--out", str(folder)])
    data = quantization_data(out, folder / SUMMARY_JSON)
    return {
        **data,
        "windows": sizes.quality_windows,
        "lengths": sizes.speed_lengths,
        "results": [ctx.relative(out), ctx.relative(folder / SUMMARY_JSON)],
    }


def quantization_data(quality_path: Path, speed_path: Path) -> dict[str, Any]:
    """The quality lab's rows (float first) with the load tester's tok/s and TTFT p50 per number of users."""
    _, quality = results.load(quality_path)
    _, speed = results.load(speed_path)
    engines = []
    for label, row in zip(("float", "int8"), quality["engines"], strict=True):
        runs = [run_ for run_ in speed["runs"] if run_["endpoint"]["name"] == label]
        engines.append(
            {
                "label": label,
                **row,
                "tok_s": {f"{run_['load_value']:g}": run_["summary"]["output_tokens_per_s"] for run_ in runs},
                "ttft_p50_ms": {f"{run_['load_value']:g}": run_["summary"]["ttft_ms"]["median"] for run_ in runs},
            }
        )
    return {"dtype": quality["dtype"], "engines": engines}


def contract(ctx: Context) -> dict[str, Any]:
    ctx.engines.ensure(ctx.engines.beside.kit_engines)
    folder = ctx.folder / "contract"
    argv = [*ctx.engines.beside.lab_args, "--out", str(folder)]
    if ctx.sizes.contract_checks:
        argv += ["--checks", ctx.sizes.contract_checks]
    lab("labs.contract", contract_lab.main, argv)
    return {**contract_data(folder / CONTRACT_JSON), "results": ctx.relative(folder / CONTRACT_JSON)}


def contract_data(path: Path) -> dict[str, Any]:
    """The contract lab's matrix, with every check that did not pass and its evidence."""
    _, payload = results.load(path)
    return {
        "engines": payload["engines"],
        "matrix": payload["matrix"],
        "differences": [
            {key: record[key] for key in ("check", "engine", "verdict", "evidence")}
            for record in payload["records"]
            if record["verdict"] != "pass"
        ],
    }
