"""python -m labs.loadtest: load-test one or more OpenAI-compatible engines and write a full report.

By default it targets the configured engine (OPENAI_BASE_URL and MODEL, from the environment or .env)
with the seed study's scenario: 48 requests at 25 req/s (Poisson), 80% wanting ~24 tokens, 20% ~150.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from pathlib import Path

from client.endpoint import ENDPOINT_SPEC, Endpoint, EndpointError
from labs.loadtest.aggregate import summarize
from labs.loadtest.console import console, progress_bar, results_table
from labs.loadtest.files import write_data
from labs.loadtest.html_report import write_html
from labs.loadtest.plots import write_plots
from labs.loadtest.runner import SCRAPE_INTERVAL_S, run_load
from labs.loadtest.workload import (
    ARRIVALS,
    DEFAULT_LENGTHS,
    DEFAULT_NUM_REQUESTS,
    DEFAULT_PROMPTS,
    DEFAULT_RATE_RPS,
    WorkloadSpec,
    parse_lengths,
    read_prompts,
)
from labs.results import Envelope, MeasuredEngine, command_line
from labs.served import replica_urls
from serve.config.environment import load_env
from ui.cli import (
    KitArgumentParser,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_floats,
    positive_int,
    positive_ints,
)

DEFAULT_OUT = Path("results/loadtest")
URL_SOURCE = "--base-url/OPENAI_BASE_URL"
WARMUP_MAX_TOKENS = 8


class UsageError(ValueError):
    """Bad input or an unusable engine; the message says what to change."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(
        prog="python -m labs.loadtest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    target = parser.add_argument_group("what to load")
    target.add_argument("--base-url", help="OpenAI /v1 URL (default: OPENAI_BASE_URL from the environment/.env)")
    target.add_argument("--model", help="model name (default: MODEL from the environment/.env)")
    target.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar=ENDPOINT_SPEC,
        help="an engine to compare side by side (repeat it); the model defaults to the first one the engine lists",
    )
    load = parser.add_argument_group("workload")
    load.add_argument("--requests", type=positive_int, default=DEFAULT_NUM_REQUESTS, help="requests per load point")
    load.add_argument(
        "--rate",
        type=positive_float,
        help=f"arrivals per second, open loop (default {DEFAULT_RATE_RPS:g} unless --concurrency)",
    )
    load.add_argument("--arrival", choices=ARRIVALS, default="poisson", help="gaps between arrivals")
    load.add_argument("--burstiness", type=positive_float, help="gamma shape for --arrival bursty (default 0.25)")
    load.add_argument("--concurrency", type=positive_int, help="closed loop with N users (alone), or a cap with --rate")
    load.add_argument("--lengths", default=DEFAULT_LENGTHS, help="fixed:N, uniform:A-B or mix:N@w,M@w")
    load.add_argument("--prompts", type=Path, help="a text file, one prompt per line (default: the lab's set)")
    load.add_argument("--seed", type=non_negative_int, default=0)
    load.add_argument("--temperature", type=non_negative_float, default=0.0)
    load.add_argument("--no-ignore-eos", action="store_true", help="let answers stop at EOS")
    sweep = parser.add_mutually_exclusive_group()
    sweep.add_argument(
        "--sweep-rate", type=positive_floats, help="comma-separated rates: one load point each, e.g. 5,10,25"
    )
    sweep.add_argument(
        "--sweep-concurrency", type=positive_ints, help="comma-separated user counts (closed loop), e.g. 1,4,16"
    )
    parser.add_argument(
        "--warmup",
        type=non_negative_int,
        default=1,
        help="untimed requests per endpoint before its first load point (default 1)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"report folder (default {DEFAULT_OUT})")
    parser.add_argument(
        "--scrape-interval-s",
        type=non_negative_float,
        default=SCRAPE_INTERVAL_S,
        help="seconds between /metrics reads; 0 turns scraping off",
    )
    return parser.parse_args(argv)


def build_specs(args: argparse.Namespace) -> list[WorkloadSpec]:
    common = dict(
        num_requests=args.requests,
        arrival=args.arrival,
        burstiness=args.burstiness,
        lengths=parse_lengths(args.lengths),
        seed=args.seed,
        temperature=args.temperature,
        ignore_eos=not args.no_ignore_eos,
        prompts=read_prompts(args.prompts) if args.prompts else DEFAULT_PROMPTS,
    )
    if args.sweep_rate:
        return [WorkloadSpec(rate_rps=rate, concurrency=args.concurrency, **common) for rate in args.sweep_rate]
    if args.sweep_concurrency:
        return [WorkloadSpec(rate_rps=None, concurrency=users, **common) for users in args.sweep_concurrency]
    rate = DEFAULT_RATE_RPS if args.rate is None and args.concurrency is None else args.rate
    return [WorkloadSpec(rate_rps=rate, concurrency=args.concurrency, **common)]


def build_endpoints(args: argparse.Namespace) -> list[Endpoint]:
    """The engines to load: --endpoint's, else the configured one with --base-url and --model on top."""
    env = load_env()
    endpoints = (
        []
        if args.endpoint
        else [
            Endpoint.from_env(
                env, args.base_url, args.model, url_source=URL_SOURCE, model_source="--model" if args.model else "MODEL"
            )
        ]
    )
    for item in args.endpoint:
        try:
            endpoints.append(Endpoint.from_spec(item, env, url_source=URL_SOURCE))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return [replace(endpoint, replica_urls=replica_urls(endpoint.base_url)) for endpoint in endpoints]


def checked(endpoint: Endpoint) -> Endpoint:
    """The endpoint once /v1/models shows its model; with the first one listed when none was named."""
    if endpoint.model:
        endpoint.check()
        return endpoint
    served = endpoint.models()
    if not served:
        raise UsageError(f"{endpoint.base_url} lists no model: add @MODEL to --endpoint {endpoint.name}=...")
    return replace(endpoint, model=served[0].id)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs = build_specs(args)
        targets = [checked(endpoint) for endpoint in build_endpoints(args)]
    except (ValueError, EndpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    interval_s = args.scrape_interval_s or None
    results = []
    for target in targets:
        if args.warmup > 0:  # the first connection and the engine's first batch are not part of the load
            warm_up = WorkloadSpec(
                num_requests=args.warmup,
                rate_rps=None,
                concurrency=1,
                lengths=parse_lengths(f"fixed:{WARMUP_MAX_TOKENS}"),
            )
            asyncio.run(run_load(target, warm_up, scrape_interval_s=None))
        for spec in specs:
            with progress_bar(f"{target.name} · {spec.label}", spec.num_requests) as on_done:
                result = asyncio.run(run_load(target, spec, on_done, interval_s))
            results.append((result, summarize(result.records)))
    console.print(results_table(results))
    notes = {result.target.name: result.metrics_note for result, _ in results if result.metrics_note}
    for name, note in notes.items():
        console.print(f"[yellow]note[/yellow] {name}: {note}")
    for result, _ in results:
        if result.served_by_replica:
            spread = ", ".join(f"{url} {count:g}" for url, count in result.served_by_replica.items())
            console.print(
                f"served by replica at {result.target.name} · {result.spec.label}: {spread} "
                "(their own request counters; the router names none per request)"
            )
    for result, summary in results:
        errors = [record.error for record in result.records if record.error]
        if errors:
            console.print(
                f"[red]{summary.num_failed} failed[/red] at {result.target.name} · {result.spec.label}; "
                f"the first said: {errors[0][:200]}"
            )
    command = command_line("python -m labs.loadtest", sys.argv[1:] if argv is None else argv)
    # an engine that exposes vLLM's /metrics names is a vLLM; nothing else here tells the kind for sure
    with_vllm_metrics = {result.target.name for result, _ in results if result.snapshots}
    name_to_target = {result.target.name: result.target for result, _ in results}
    envelope = Envelope.now(
        command,
        [
            MeasuredEngine(target.model, target.root_url, "vllm" if name in with_vllm_metrics else None)
            for name, target in name_to_target.items()
        ],
    )
    data_paths = write_data(args.out, results, envelope)
    plots = write_plots(args.out, results)
    report = write_html(args.out, results, plots, envelope)
    for path in [*data_paths, *(plot.path for plot in plots), report]:
        console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
