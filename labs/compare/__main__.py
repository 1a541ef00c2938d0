"""python -m labs.compare: the same prompts at every configured engine, one after another, then all at once.

Per engine: the seed's four prompts sequentially; then the matched set (N requests) sequentially and
concurrently. Prints each request like the seed's curl lines, then a table; writes text, JSON and a PNG.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from rich.console import Console

from client.endpoint import ENDPOINT_SPEC, Endpoint, EndpointError, named_endpoints
from client.stream import RequestRecord
from labs.compare.aggregate import CONCURRENT, scaling
from labs.compare.report import JSON_FILE, TABLE_WIDTH, ResultsWriter, request_line, table
from labs.compare.run import check, engine_died, http_client, run_phase, warm_up
from labs.compare.workload import DEFAULT_N, MAX_TOKENS, TEMPERATURE, Phase, phases, targets
from labs.results import command_line
from serve.config.environment import load_env
from serve.config.paths import ROOT
from serve.config.settings import Settings, engine_list
from serve.engines.runtimes import ENGINES
from ui.cli import KitArgumentParser, positive_int
from ui.progress import console, err_console, fail
from ui.values import SettingsError

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


def engine_settings(settings: Settings) -> dict[str, str]:
    """What the kit starts each engine with (as configured here; a server started otherwise may differ)."""
    return {name: f"(as configured: {engine.configured(settings)})" for name, engine in ENGINES.items()}


def print_request(engine: str, mode: str, record: RequestRecord) -> None:
    console.print(request_line(engine, mode, record), markup=False)


async def compare(
    chosen: tuple[Endpoint, ...], plan: tuple[Phase, ...], max_tokens: int, writer: ResultsWriter
) -> bool:
    """Run every phase on every engine; False if an engine stopped answering (its later runs skipped)."""
    all_answered = True
    async with http_client() as http:
        for target in chosen:  # bad input stops here, before anything is measured
            writer.engines.append(await check(http, target))
        for target in chosen:
            console.print(f"\n[bold]{target.name}[/bold] at {target.base_url}, model {target.model}")
            warm = await warm_up(http, target)
            writer.warmups[target.name] = warm.to_dict()
            for index, phase in enumerate(plan):
                how = "all at once" if phase.concurrent else "one after another"
                with console.status(f"{target.name}: {phase.mode}, {len(phase.prompts)} requests {how} ..."):
                    run = await run_phase(
                        http, target, phase, max_tokens, partial(print_request, target.name, phase.mode)
                    )
                if engine_died(run):
                    run.note = "engine stopped answering"
                    writer.add(run)
                    skipped = ", ".join(later.mode for later in plan[index + 1 :]) or "nothing"
                    writer.notes.append(f"{target.name} stopped answering during {phase.mode}; skipped: {skipped}")
                    console.print(
                        f"[bold red]{target.name} stopped answering[/bold red]; results so far kept, "
                        f"skipping its remaining runs ({skipped})"
                    )
                    all_answered = False
                    break
                writer.add(run)
                console.print(f"  [dim]{phase.mode}: {run.wall_s:.3f} s wall[/dim]")
    return all_answered


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = Settings.load()
        chosen = chosen_engines(settings, args)
    except (SettingsError, EndpointError) as exc:
        fail(str(exc), code=2)
    started = datetime.now(UTC)
    folder = args.results or RESULTS_DIR / f"compare-{started:%Y%m%d-%H%M%S}"
    config = {
        "started_at": started.isoformat(timespec="seconds"),
        "n": args.n,
        "max_tokens": args.max_tokens,
        "temperature": TEMPERATURE,
        "warmup_requests_per_engine": 1,
        "argv": sys.argv,
        "engine_settings": {
            target.name: engine_settings(settings).get(target.name, f"(named on the command line: {target.base_url})")
            for target in chosen
        },
    }
    plan = phases(args.n)
    console.print(
        f"Comparing {', '.join(target.name for target in chosen)}: {len(plan[0].prompts)} seed prompts "
        f"sequentially, then {args.n} matched requests sequentially and concurrently, "
        f"max_tokens {args.max_tokens}. Results: {folder}"
    )
    command = command_line("python -m labs.compare", sys.argv[1:] if argv is None else argv)
    writer = ResultsWriter(folder, config, command)
    code = 0
    try:
        code = 0 if asyncio.run(compare(chosen, plan, args.max_tokens, writer)) else 1
    except EndpointError as exc:
        if not writer.runs:
            fail(str(exc), code=2)
        writer.notes.append(str(exc))
        err_console.print(f"[bold red]error:[/bold red] {exc}")
        code = 1
    except KeyboardInterrupt:
        writer.notes.append("interrupted by the user")
        console.print("[bold red]interrupted[/bold red]; writing the results gathered so far")
        code = 130
    summaries = writer.summaries
    for engine in dict.fromkeys(summary.engine for summary in summaries if "chunks" in summary.tokens_source):
        writer.notes.append(
            f"{engine} sent no usage in its streams: its output tokens are the streamed content "
            "chunks (one token each on llama.cpp's server)"
        )
    if summaries:
        wide = Console(width=max(console.width, TABLE_WIDTH), highlight=False, force_terminal=console.is_terminal)
        wide.print(table(summaries))  # rich assumes 80 columns off a terminal; the table needs more
    writer.write_json()
    text, plot = writer.write_text(), writer.write_plot()
    concurrent = {summary.engine: summary for summary in summaries if summary.mode == CONCURRENT}
    for engine, factor in scaling(summaries).items():
        caveat = ""
        if concurrent[engine].num_bad:
            caveat = (
                f" (not a speed-up: {concurrent[engine].num_bad} of {concurrent[engine].num_requests} "
                "concurrent answers were cut short or failed)"
            )
        console.print(f"{engine}: matched sequential / concurrent = {factor:.2f}x{caveat}")
    bad = sum(summary.num_bad for summary in summaries)
    if bad:
        console.print(
            f"[bold red]{bad} request(s) truncated, empty or failed[/bold red] (see the table; "
            "llama.cpp's default server cuts a running stream short when another request arrives)"
        )
    console.print(f"Wrote {text}, {folder / JSON_FILE}" + (f", {plot}" if plot else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
