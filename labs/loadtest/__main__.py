"""python -m labs.loadtest: load-test one or more OpenAI-compatible engines and write a full report.

By default it targets the configured engine (OPENAI_BASE_URL and MODEL, from the environment or .env)
with the seed study's scenario: 48 requests at 25 req/s (Poisson), 80% wanting ~24 tokens, 20% ~150.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from client.endpoint import ENDPOINT_SPEC, Endpoint, EndpointError
from labs.loadtest.lab import LoadTest, UsageError, load_test
from labs.loadtest.runner import SCRAPE_INTERVAL_S
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
from labs.results import command_line
from ui.cli import (
    KitArgumentParser,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_floats,
    positive_int,
    positive_ints,
)
from ui.environment import ROOT, load_env

DEFAULT_OUT = ROOT / "results" / "loadtest"  # the one results folder, wherever it is run from
URL_SOURCE = "--base-url/OPENAI_BASE_URL"


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
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report folder (default results/loadtest)")
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
    return endpoints


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = LoadTest(
            build_endpoints(args),
            build_specs(args),
            args.out,
            command_line("python -m labs.loadtest", sys.argv[1:] if argv is None else argv),
            args.warmup,
            args.scrape_interval_s or None,
        )
        load_test(config)
    except (ValueError, EndpointError) as exc:  # bad input or an engine that does not answer: nothing measured
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
