"""Where a start's seconds go, and what a lever saves: each arm started with an empty compile cache (cold, as on a
new machine or after a settings change) and again on the cache that start wrote (warm, as after an `.env` edit
that changes nothing compiled), the arms alternating round by round, so background load hits each alike.

    .venv/bin/python -m benchmarks.starts --arm eager ENFORCE_EAGER=true --rounds 2

For each start: seconds from launch to /health, to the first streamed token of a short chat sent at once after
/health, what vLLM's log says it compiled, the machine's load average at launch, and when each phase of vLLM's
own log began (serve/engines/vllm_log.py: engine core, weights, compile or cache load, warm-up, KV cache, HTTP
server), in seconds from launch. The first arm is the baseline of the ratios. Writes results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

from rich.table import Table

from benchmarks.arms import BUILTIN_ARMS, Arm, arm_settings, engine_environ, guarded, parse_overrides
from client.endpoint import Endpoint
from labs.loadtest.runner import run_load
from labs.loadtest.workload import WorkloadSpec, parse_lengths
from labs.results import Envelope, MeasuredEngine, command_line, write
from serve.config.paths import ROOT
from serve.config.vllm_flags import API_SERVER_MODULE
from serve.engines import hand_over
from serve.engines.runtimes import ENGINES, running
from serve.engines.vllm_log import PHASES, compile_cache_state, phase_starts
from serve.processes import process
from ui.cli import KitArgumentParser, non_negative_int, positive_int
from ui.progress import StepFailed, console

DEFAULT_OUT = ROOT / "results" / "starts"
FIRST_TOKEN_LENGTHS = "fixed:8"
# Where vLLM keeps what a start compiled (its AOT artifacts) and where inductor keeps its kernels: a cold start
# gets both empty, but for what the install records there (serve/install/vllm_venv.py: the model's class).
CACHE_ENV = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR")
INSTALL_RECORDS = ("modelinfos",)


def vllm_cache_root() -> Path:
    """vLLM's own cache folder, as vLLM finds it (VLLM_CACHE_ROOT, else XDG_CACHE_HOME/vllm)."""
    if os.environ.get("VLLM_CACHE_ROOT"):
        return Path(os.environ["VLLM_CACHE_ROOT"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm"


def cold_cache(folder: Path) -> None:
    """An empty compile cache holding only what the install records (as on a machine that just installed)."""
    for name in INSTALL_RECORDS:
        recorded = vllm_cache_root() / name
        if recorded.is_dir():
            shutil.copytree(recorded, folder / "vllm_cache_root" / name)


def build_parser() -> argparse.ArgumentParser:
    parser = KitArgumentParser(
        prog="python -m benchmarks.starts", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--arms",
        default="kit",
        help=f"built-in vLLM arms, in order ({', '.join(BUILTIN_ARMS)}); the first is the baseline",
    )
    parser.add_argument(
        "--arm",
        nargs="+",
        action="append",
        default=[],
        metavar=("NAME", "KEY=VALUE"),
        help="one more vLLM arm: the kit's settings with these overrides (repeatable)",
    )
    parser.add_argument("--rounds", type=positive_int, default=2, help="cold starts per arm, arms alternating")
    parser.add_argument("--warm", type=non_negative_int, default=1, help="warm restarts after each cold start")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json")
    return parser


def chosen_arms(args: argparse.Namespace) -> list[Arm]:
    names = [name for name in args.arms.split(",") if name]
    unknown = [name for name in names if name not in BUILTIN_ARMS or BUILTIN_ARMS[name].engine != "vllm"]
    if unknown:
        vllm_arms = [name for name, arm in BUILTIN_ARMS.items() if arm.engine == "vllm"]
        raise ValueError(f"--arms {args.arms!r}: {unknown} are not vLLM arms; use {', '.join(vllm_arms)}")
    extra = [Arm(name, "vllm", parse_overrides(pairs), "explored: " + " ".join(pairs)) for name, *pairs in args.arm]
    for arm in extra:
        engine_environ(arm)  # a misspelt name fails now, not after the first arm compiled for minutes
    return [BUILTIN_ARMS[name] for name in names] + extra


def first_token_s(base_url: str, model: str) -> float:
    """Seconds from sending a short streamed chat to its first token."""
    target = Endpoint.at("start", f"{base_url}/v1", model, kind="vllm", url_source="--arm", model_source="MODEL_NAME")
    spec = WorkloadSpec(num_requests=1, rate_rps=None, concurrency=1, lengths=parse_lengths(FIRST_TOKEN_LENGTHS))
    (record,) = asyncio.run(run_load(target, spec, scrape_interval_s=None)).records
    if not record.ok or record.first_token_s is None:
        raise StepFailed(f"the first request after /health failed: {record.error or record.status}")
    return record.first_token_s - record.sent_s


def one_start(arm: Arm, cache: Path, kind: str, round_number: int) -> dict[str, Any]:
    """Start the arm on `cache`, time /health and the first token, read its log's phases, stop it."""
    settings = arm_settings(arm)
    serve_early = settings.serve_while_compiling is True  # only where the arm asks: auto is up's, not a benchmark's
    (runtime,) = ENGINES[arm.engine].runtimes(settings)
    runtime.install()
    load_1m = os.getloadavg()[0]
    env = {**engine_environ(arm), **{name: str(cache / name.lower()) for name in CACHE_ENV}}
    launched = datetime.now()
    with running([runtime], environ=env, serve_early=serve_early) as (started,):
        token_s = first_token_s(runtime.base_url, runtime.served_model)
        # an arm that serves while compiling: until the compiled engine has the port (serve/engines/hand_over.py)
        waited = hand_over.wait_for_compiled(runtime.port, API_SERVER_MODULE, "The benchmark") if serve_early else 0.0
        took_over_s = (datetime.now() - launched).total_seconds() if serve_early else None
        cpu_s = process.group_cpu_seconds(started.pid)  # the compilers it reaped included
        log_text = runtime.log_path.read_text(errors="replace")
    phases = {
        name: round((at - launched.replace(microsecond=0)).total_seconds(), 1)
        for name, at in phase_starts(log_text, launched.year).items()
    }
    result = {
        "arm": arm.name,
        "round": round_number,
        "kind": kind,
        "load_average_1m": load_1m,
        "seconds_to_healthy": started.seconds_to_healthy,
        "health_to_first_token_s": token_s,
        "launch_to_first_token_s": started.seconds_to_healthy + token_s,
        "launch_to_compiled_s": took_over_s,  # serving while compiling: when the compiled engine had the port
        "waited_for_compiled_s": waited,
        "cpu_s": cpu_s,
        "compile_cache": compile_cache_state(log_text, settings),
        "phase_starts_s": phases,
    }
    console.print(
        f"  {arm.name:<12} {kind:<5} round {round_number}: healthy {started.seconds_to_healthy:5.1f} s, first token "
        f"+{token_s:.2f} s, {cpu_s:.0f} CPU s ({result['compile_cache']}; load {load_1m:.1f}); phases {phases}"
        + (f"; the compiled engine took over {took_over_s:.1f} s after launch" if took_over_s is not None else "")
    )
    return result


def summary(starts: list[dict[str, Any]], arms: list[Arm]) -> list[dict[str, Any]]:
    """Per arm and kind, the medians over rounds, and their ratio to the baseline arm's."""
    rows = []
    for kind in ("cold", "warm"):
        base = None
        for arm in arms:
            mine = [
                start for start in starts if start["arm"] == arm.name and start["kind"] == kind and "error" not in start
            ]
            if not mine:
                continue
            row = {
                "arm": arm.name,
                "kind": kind,
                "starts": len(mine),
                "median_seconds_to_healthy": median(start["seconds_to_healthy"] for start in mine),
                "median_launch_to_first_token_s": median(start["launch_to_first_token_s"] for start in mine),
                "median_cpu_s": median(start["cpu_s"] for start in mine),
            }
            base = base or row
            first_token_s = row["median_launch_to_first_token_s"]
            row["first_token_vs_baseline"] = first_token_s / base["median_launch_to_first_token_s"]
            rows.append(row)
    return rows


def print_summary(rows: list[dict[str, Any]]) -> None:
    table = Table(title="Starts: medians over rounds (seconds from launch)")
    for column in ("arm", "start", "n", "healthy", "first token", "CPU s", "first token vs baseline"):
        table.add_column(column, justify="left" if column in ("arm", "start") else "right")
    for row in rows:
        table.add_row(
            row["arm"],
            row["kind"],
            str(row["starts"]),
            f"{row['median_seconds_to_healthy']:.1f}",
            f"{row['median_launch_to_first_token_s']:.1f}",
            f"{row['median_cpu_s']:.0f}",
            f"{row['first_token_vs_baseline']:.2f}x",
        )
    console.print(table)


def run(args: argparse.Namespace) -> dict[str, Any]:
    arms = chosen_arms(args)
    scratch = Path(tempfile.mkdtemp(prefix="kit-starts-"))
    starts: list[dict[str, Any]] = []
    began = time.time()
    try:
        for round_number in range(1, args.rounds + 1):
            order = arms if round_number % 2 else arms[::-1]  # who goes first alternates too
            for arm in order:
                cache = scratch / f"{arm.name}-{round_number}"
                cold_cache(cache)
                for kind in ["cold"] + ["warm"] * args.warm:
                    try:
                        starts.append(one_start(arm, cache, kind, round_number))
                    except StepFailed as exc:  # recorded, and the run goes on: a timed-out start is a result too
                        console.print(f"  {arm.name:<12} {kind:<5} round {round_number}: failed: {str(exc)[:200]}")
                        starts.append({"arm": arm.name, "round": round_number, "kind": kind, "error": str(exc)[:2000]})
                        break  # a warm start needs the cold one's cache
                shutil.rmtree(cache, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "model": arm_settings(arms[0]).model_name,
        "started_unix_s": began,
        "duration_s": time.time() - began,
        "arms": [{"name": arm.name, "overrides": dict(arm.overrides), "why": arm.why} for arm in arms],
        "phases": [phase.name for phase in PHASES],
        "starts": starts,
        "summary": summary(starts, arms),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = guarded(lambda: run(args))
    print_summary(report["summary"])
    command = command_line("python -m benchmarks.starts", sys.argv[1:] if argv is None else argv)
    engines = [MeasuredEngine(report["model"], "http://127.0.0.1 (a free port per start)", "vllm")]
    write(args.out / "results.json", Envelope.now(command, engines), report)
    console.print(f"Wrote {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
