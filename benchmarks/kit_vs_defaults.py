"""Kit defaults vs vLLM out of the box vs the Ollama-class engine, side by side, in one run on one machine.

    .venv/bin/python -m benchmarks.kit_vs_defaults

The first arm (the baseline: the kit's defaults) is started, restarted once (the warm restart a lab user
gets after every `.env` edit) and stays up for the whole run; each other arm is started next to it in turn
(two engines at most), and the two alternate round by round at each concurrency, so background load on a
shared machine hits both alike and every ratio compares the same window. Every arm plays the same
closed-loop workload: the same prompts and seeded output lengths (ignore_eos, so every engine writes them
out). It prints output tok/s, TTFT p50/p99, the ratios, and where each arm stands against this machine's
memory-bandwidth ceiling for decode, and writes results.json and results.png. Request timing is
labs/loadtest's (client/stream.py); nothing here times a request itself.

Explore a knob by adding an arm: `--arm eager ENFORCE_EAGER=true --arm bs32 "VLLM_EXTRA_ARGS=--block-size 32"`.
Measure servers that are already running instead: `--attach vllm=http://127.0.0.1:8009/v1`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.arms import (
    BUILTIN_ARMS,
    Arm,
    RunningArm,
    add_cpu_isa_argument,
    engine_environ,
    guarded,
    parse_overrides,
    serving,
    use_cpu_isa,
)
from benchmarks.roofline import Bandwidth, ceiling, measure_bandwidth
from benchmarks.throughput_report import comparisons, print_report, write_plot
from client.endpoint import Endpoint
from client.stream import RequestRecord
from labs.loadtest.aggregate import summarize
from labs.loadtest.runner import run_load
from labs.loadtest.workload import DEFAULT_PROMPTS, WorkloadSpec, parse_lengths
from labs.results import Envelope, MeasuredEngine, command_line, write
from serve.config.machine import detect
from serve.config.paths import ROOT
from ui.cli import KitArgumentParser, non_negative_int, positive_int, positive_ints
from ui.progress import console

DEFAULT_ARMS = "kit,vllm-defaults,llamacpp,llamaserver-n"
DEFAULT_CONCURRENCY = "1,4,8,16"
DEFAULT_LENGTHS = "uniform:48-80"  # mean 64 output tokens, as in the measurements
DEFAULT_REQUESTS_PER_USER = 2
DEFAULT_MIN_REQUESTS = 12
DEFAULT_RESTARTS = 1
DEFAULT_ROUNDS = 2
DEFAULT_OUT = ROOT / "results" / "kit_vs_defaults"
WARMUP_REQUESTS = 2
# vLLM's processes busy-poll their shared-memory queues for 1 s after the last message
# (vllm/distributed/device_communicators/shm_broadcast.py, SpinCondition). Waiting that out before a round
# keeps the arm that just finished from stealing the measured arm's CPU (with vLLM's auto binding both pin
# their compute thread to the same core): measured here, the baseline lost up to 20% and its TTFT p50 went
# from 75 to 400 ms without the pause.
SETTLE_S = 1.5
WARMUP_TOKENS = "fixed:8"


def build_parser() -> argparse.ArgumentParser:
    parser = KitArgumentParser(
        prog="python -m benchmarks.kit_vs_defaults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--arms",
        default=DEFAULT_ARMS,
        help=f"built-in arms to run, in order ({', '.join(BUILTIN_ARMS)}); the first is the baseline of the ratios",
    )
    parser.add_argument(
        "--arm",
        nargs="+",
        action="append",
        default=[],
        metavar=("NAME", "KEY=VALUE"),
        help="one more vLLM arm: the kit's settings with these overrides (repeatable)",
    )
    parser.add_argument(
        "--attach",
        action="append",
        default=[],
        metavar="[NAME:]ENGINE=URL",
        help="measure a running vllm, llamacpp or llamaserver server at this /v1 URL (replaces --arms; NAME tells "
        "two of one engine apart)",
    )
    parser.add_argument("--concurrency", type=positive_ints, default=positive_ints(DEFAULT_CONCURRENCY))
    parser.add_argument(
        "--lengths", default=DEFAULT_LENGTHS, help="output lengths: fixed:64, uniform:48-80, mix:24@0.8,150@0.2"
    )
    parser.add_argument("--requests-per-user", type=positive_int, default=DEFAULT_REQUESTS_PER_USER)
    parser.add_argument(
        "--min-requests", type=positive_int, default=DEFAULT_MIN_REQUESTS, help="at least this many requests per point"
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=DEFAULT_ROUNDS,
        help="rounds per load point; the baseline and each arm alternate round by round",
    )
    parser.add_argument(
        "--restarts",
        type=non_negative_int,
        default=DEFAULT_RESTARTS,
        help="warm restarts of each started vLLM arm before it is measured",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0)
    add_cpu_isa_argument(parser)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json and results.png")
    return parser


def chosen_arms(args: argparse.Namespace) -> list[Arm]:
    if args.attach:
        arms = []
        for item in args.attach:
            named, sep, url = item.partition("=")
            name, _, engine = named.rpartition(":")
            if not sep or not url.startswith("http"):
                raise ValueError(
                    f"--attach {item!r} is invalid: write [NAME:]ENGINE=URL, e.g. vllm=http://127.0.0.1:8009/v1"
                )
            arms.append(Arm(name or engine, engine, (), "attached: already running", url.rstrip("/")))
        return arms
    names = [name for name in args.arms.split(",") if name]
    unknown = [name for name in names if name not in BUILTIN_ARMS]
    if unknown:
        raise ValueError(f"--arms {args.arms!r} names unknown arms {unknown}: use {', '.join(BUILTIN_ARMS)}")
    extra = [Arm(name, "vllm", parse_overrides(pairs), "explored: " + " ".join(pairs)) for name, *pairs in args.arm]
    for arm in extra:
        engine_environ(arm)  # a misspelt name fails now, not after the first arms ran for minutes
    return [BUILTIN_ARMS[name].for_users(max(args.concurrency)) for name in names] + extra


def workload(args: argparse.Namespace, concurrency: int) -> WorkloadSpec:
    requests = max(args.min_requests, args.requests_per_user * concurrency)
    return WorkloadSpec(
        num_requests=requests,
        rate_rps=None,
        concurrency=concurrency,
        lengths=parse_lengths(args.lengths),
        prompts=DEFAULT_PROMPTS,
        seed=args.seed,
        ignore_eos=True,
    )


class ArmRun:
    """One healthy arm and every round measured on it, by concurrency."""

    def __init__(self, arm: Arm, served: RunningArm) -> None:
        self.arm = arm
        self.served = served
        self.target = Endpoint.at(
            arm.name, served.api_url, served.model, kind=arm.engine, url_source="--attach", model_source="MODEL_NAME"
        )
        self.target.check()
        self.rounds: dict[int, list[list[RequestRecord]]] = {}
        for number, start in enumerate(served.starts):
            kind = "first start" if number == 0 else "warm restart"
            console.print(f"  {kind}: healthy after {start.seconds_to_healthy:.1f} s ({start.compile_cache})")

    def warm_up(self, seed: int) -> None:
        spec = WorkloadSpec(
            num_requests=WARMUP_REQUESTS,
            rate_rps=None,
            concurrency=WARMUP_REQUESTS,
            lengths=parse_lengths(WARMUP_TOKENS),
            seed=seed,
        )
        asyncio.run(run_load(self.target, spec, scrape_interval_s=None))

    def measure(self, spec: WorkloadSpec) -> float:
        """One round at this load point, after the machine settles; its output tok/s."""
        time.sleep(SETTLE_S)
        records = asyncio.run(run_load(self.target, spec, scrape_interval_s=None)).records
        self.rounds.setdefault(spec.concurrency or 0, []).append(records)
        summary = summarize(records)
        console.print(
            f"  {self.arm.name:<18} {spec.concurrency:>3} users  {summary.num_ok}/{summary.num_requests} "
            f"ok  {summary.output_tokens_per_s:7.1f} output tok/s  TTFT p50 {summary.ttft_ms.median:6.0f} ms"
        )
        return summary.output_tokens_per_s

    def result(self, bandwidth: Bandwidth) -> dict[str, Any]:
        """Per point: latencies over every round's requests; throughput the median of the rounds'."""
        points = []
        for concurrency, rounds in sorted(self.rounds.items()):
            per_round = [summarize(records) for records in rounds]
            summary = dataclasses.replace(
                summarize([record for records in rounds for record in records]),
                output_tokens_per_s=median(round_.output_tokens_per_s for round_ in per_round),
                request_throughput_per_s=median(round_.request_throughput_per_s for round_ in per_round),
                duration_s=sum(round_.duration_s for round_ in per_round),
            )
            batch = min(concurrency, self.served.max_sequences_per_step)
            limit = ceiling(self.served.weight_bytes, batch, bandwidth, summary.output_tokens_per_s)
            points.append(
                {
                    "concurrency": concurrency,
                    "summary": summary.to_dict(),
                    "ceiling": limit.to_dict(),
                    "rounds_output_tokens_per_s": [round_.output_tokens_per_s for round_ in per_round],
                }
            )
        return {
            "name": self.arm.name,
            "engine": self.arm.engine,
            "why": self.arm.why,
            "model": self.served.model,
            "api_url": self.served.api_url,
            "overrides": dict(self.arm.overrides),
            "resolved": self.served.resolved,
            "weight_bytes": self.served.weight_bytes,
            "starts": [
                {"seconds_to_healthy": start.seconds_to_healthy, "compile_cache": start.compile_cache}
                for start in self.served.starts
            ],
            "points": points,
        }


def side_by_side(base: ArmRun, other: ArmRun | None, args: argparse.Namespace) -> dict[int, float | None]:
    """Alternate the two arms, round by round, at each load point: background load hits both alike.

    The ratio at each point is the baseline's median output tok/s over the other's, in the same window.
    """
    ratios: dict[int, float | None] = {}
    for concurrency in args.concurrency:
        spec = workload(args, concurrency)
        base_tok, other_tok = [], []
        for _ in range(args.rounds):
            base_tok.append(base.measure(spec))
            if other is not None:
                other_tok.append(other.measure(spec))
        if other is not None:
            ratios[concurrency] = median(base_tok) / median(other_tok) if median(other_tok) > 0 else None
    return ratios


def run(args: argparse.Namespace) -> dict[str, Any]:
    arms = chosen_arms(args)
    use_cpu_isa(args.cpu_isa)
    threads = detect().usable_cores
    with console.status(f"Measuring memory bandwidth (numpy copy, {threads} threads)"):
        bandwidth = measure_bandwidth(threads)
    console.print(
        f"Memory bandwidth: {bandwidth.copy_bytes_per_s / 1e9:.1f} GB/s (numpy copy on {threads} threads, read+write)"
    )
    started = time.time()
    others: list[dict[str, Any]] = []
    ratios: dict[str, dict[int, float | None]] = {}
    console.print(f"[bold]{arms[0].name}[/bold] (baseline, up for the whole run): {arms[0].why}")
    with serving(arms[0], args.restarts) as served:
        base = ArmRun(arms[0], served)
        base.warm_up(args.seed)
        if len(arms) == 1:
            side_by_side(base, None, args)
        for arm in arms[1:]:
            console.print(f"[bold]{arm.name}[/bold] (next to {base.arm.name}): {arm.why}")
            with serving(arm, args.restarts) as served_other:
                other = ArmRun(arm, served_other)
                other.warm_up(args.seed)
                ratios[arm.name] = side_by_side(base, other, args)
            others.append(other.result(bandwidth))
    results = [base.result(bandwidth), *others]
    machine = detect()
    return {
        "started_unix_s": started,
        "duration_s": time.time() - started,
        "machine": {
            "usable_cores": machine.usable_cores,
            "isa": machine.isa,
            "isa_stand_in": args.cpu_isa is not None,
            "bf16_flag": machine.bf16_flag,
            "memory_available_bytes": machine.memory_available_bytes,
            "bandwidth": bandwidth.to_dict(),
        },
        "workload": {
            "closed_loop": True,
            "concurrency": args.concurrency,
            "lengths": args.lengths,
            "ignore_eos": True,
            "prompts": len(DEFAULT_PROMPTS),
            "seed": args.seed,
            "rounds": args.rounds,
            "requests_per_round": {c: workload(args, c).num_requests for c in args.concurrency},
        },
        "arms": results,
        "comparisons": comparisons(arms[0].name, ratios),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = guarded(lambda: run(args))
    engines = [
        MeasuredEngine(arm["model"], arm["api_url"].removesuffix("/v1"), arm["engine"]) for arm in report["arms"]
    ]
    command = command_line("python -m benchmarks.kit_vs_defaults", sys.argv[1:] if argv is None else argv)
    write(args.out / "results.json", Envelope.now(command, engines), report)
    write_plot(report, args.out / "results.png")
    print_report(report)
    console.print(f"Wrote {args.out / 'results.json'} and {args.out / 'results.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
