"""python -m labs.compare: the same prompts at every configured engine, one after another, then all at once.

Per engine: the seed's four prompts sequentially; then the matched set (N requests) sequentially and
concurrently. Prints each request like the seed's curl lines, then a table; writes text, JSON and a PNG.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from client.endpoint import ENDPOINT_SPEC, Endpoint, EndpointError, named_endpoints
from labs.compare.lab import Comparison, compare, engine_settings
from labs.compare.workload import DEFAULT_N, MAX_TOKENS, targets
from labs.results import command_line
from serve.config.paths import ROOT
from serve.config.settings import Settings, engine_list
from ui.cli import KitArgumentParser, positive_int
from ui.environment import load_env
from ui.progress import fail

RESULTS_DIR = ROOT / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(prog="python -m labs.compare", description=__doc__)
    parser.add_argument(
        "-n",
        "--n",
        type=positive_int,
        default=DEFAULT_N,
        help=f"requests in the matched sequential and concurrent runs (default {DEFAULT_N}; try 8, 16)",
    )
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        default=MAX_TOKENS,
        help=f"longest answer per request (default {MAX_TOKENS})",
    )
    parser.add_argument(
        "--engines",
        default=None,
        help="engines to compare, e.g. vllm,llamacpp or vllm,llamacpp,llamaserver (default: the ENGINES setting)",
    )
    parser.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar=ENDPOINT_SPEC,
        help="also compare any OpenAI-compatible engine, named: your own Ollama as "
        "ollama=http://127.0.0.1:11434/v1@smollm2:135m (without @MODEL, the first it lists); repeat it; without "
        "--engines, only these",
    )
    parser.add_argument(
        "--results", type=Path, default=None, help="folder for the results (default results/compare-<UTC time>)"
    )
    return parser.parse_args(argv)


def chosen_engines(settings: Settings, args: argparse.Namespace) -> tuple[Endpoint, ...]:
    """The kit's engines (--engines, else ENGINES unless --endpoint is given), then each --endpoint engine."""
    chosen: list[Endpoint] = []
    if args.engines or not args.endpoint:
        chosen += targets(settings, engine_list("--engines", args.engines) if args.engines else None)
    chosen += named_endpoints(args.endpoint, load_env(), beside=chosen)
    return tuple(chosen)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    try:
        settings = Settings.load()
        config = Comparison(
            chosen_engines(settings, args),
            args.results or RESULTS_DIR / f"compare-{started:%Y%m%d-%H%M%S}",
            command_line("python -m labs.compare", sys.argv[1:] if argv is None else argv),
            args.n,
            args.max_tokens,
            engine_settings(settings),
        )
        compared = compare(config)
    except (ValueError, EndpointError) as exc:  # bad input (SettingsError among them): nothing measured
        fail(str(exc), code=2)
    except KeyboardInterrupt:  # what was measured is written
        return 130
    return 0 if compared.complete else 1


if __name__ == "__main__":
    sys.exit(main())
