"""python -m labs.contract: one fixed set of OpenAI-contract checks against every engine ENGINES names, or any
--endpoint, with the stock OpenAI SDK and raw HTTP; a matrix of pass / fail / differs with the evidence.

    .venv/bin/python -m labs.contract                         # the engines ENGINES names
    .venv/bin/python -m labs.contract --engines vllm,llamacpp,llamaserver --endpoint teaching=http://127.0.0.1:8012/v1
    .venv/bin/python -m labs.contract --endpoint ollama=http://127.0.0.1:11434/v1@smollm2:135m     # a real Ollama
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from client.endpoint import ENDPOINT_SPEC, Endpoint, EndpointError, named_endpoints
from labs.compare.workload import targets
from labs.contract.lab import Contract, ContractStopped, check_contract
from labs.contract.registry import CHECKS
from labs.results import command_line
from serve.config.paths import ROOT
from serve.config.settings import Settings, engine_list
from ui.cli import KitArgumentParser
from ui.environment import load_env
from ui.progress import fail

RESULTS_DIR = ROOT / "results"


def check_names(raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    unknown = [name for name in names if name not in CHECKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown check(s) {', '.join(unknown) or '(none given)'}: use a "
            f"comma-separated list of {', '.join(CHECKS)}"
        )
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(prog="python -m labs.contract", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engines",
        default=None,
        help="the kit's engines to check, e.g. vllm,llamacpp,llamaserver (default: the ENGINES "
        "setting, unless --url is given)",
    )
    parser.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar=ENDPOINT_SPEC,
        help="also check any OpenAI-compatible engine, named: a real Ollama's "
        "ollama=http://127.0.0.1:11434/v1@smollm2:135m, a hosted API (without @MODEL, the first it lists); repeat it",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="the key to send to --endpoint's engines (default: OPENAI_API_KEY, else VLLM_API_KEY, as the client)",
    )
    parser.add_argument(
        "--checks",
        type=check_names,
        default=tuple(CHECKS),
        help="only these checks, comma-separated (default: all of them)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for contract.json and report.html (default results/contract-<UTC time>)",
    )
    return parser.parse_args(argv)


def chosen_endpoints(args: argparse.Namespace) -> list[Endpoint]:
    """The kit's engines (--engines, else ENGINES unless --endpoint is given), then each --endpoint engine."""
    endpoints: list[Endpoint] = []
    if args.engines or not args.endpoint:
        settings = Settings.load()
        endpoints += targets(settings, engine_list("--engines", args.engines) if args.engines else None)
    endpoints += named_endpoints(args.endpoint, load_env(), beside=endpoints, api_key=args.api_key)
    return endpoints


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    try:
        config = Contract(
            chosen_endpoints(args),
            args.out or RESULTS_DIR / f"contract-{started:%Y%m%d-%H%M%S}",
            command_line("python -m labs.contract", sys.argv[1:] if argv is None else argv),
            args.checks,
        )
        check_contract(config)
    except (ValueError, EndpointError) as exc:  # bad input (SettingsError among them): nothing checked
        fail(str(exc), code=2)
    except ContractStopped as exc:
        fail(str(exc), code=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
