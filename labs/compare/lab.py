"""The comparison as one function: the engines in, every phase's runs and summaries out, the results written as
they come. `python -m labs.compare` builds a `Comparison` from its command line; the tour builds one from its sizes.

Bad input stops before anything is measured (`ValueError`, or `EndpointError` for an engine that does not
answer). An engine that stops answering later is a
note: its remaining phases are skipped, what was measured is kept, and `Compared.complete` is False. Ctrl-C writes
what was measured, then goes on up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from client.endpoint import Endpoint, EndpointError
from client.stream import RequestRecord
from labs.compare.aggregate import CONCURRENT, scaling
from labs.compare.report import TABLE_WIDTH, ResultsWriter, request_line, table
from labs.compare.run import check, engine_died, http_client, run_phase, warm_up
from labs.compare.workload import DEFAULT_N, MAX_TOKENS, TEMPERATURE, Phase, phases
from labs.served import wait_for_compiled
from serve.config.settings import Settings
from serve.engines.runtimes import ENGINES
from ui.progress import console, err_console


@dataclass(frozen=True, slots=True)
class Comparison:
    """Which engines, how many matched requests of how many tokens, where the results go. `engine_settings` says
    per engine what it was started with, for the results' text (`command` is how to run it again)."""

    engines: Sequence[Endpoint]
    folder: Path
    command: str
    n: int = DEFAULT_N
    max_tokens: int = MAX_TOKENS
    engine_settings: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.engines:
            raise ValueError("nothing to compare: name an engine (--engines or --endpoint)")
        if self.n <= 0 or self.max_tokens <= 0:
            raise ValueError(f"-n {self.n} --max-tokens {self.max_tokens}: give both at least 1")


@dataclass(frozen=True, slots=True)
class Compared:
    """What the comparison measured, as its results file holds it, and whether every engine answered to the end."""

    document: dict[str, Any]
    complete: bool
    paths: list[Path]


def engine_settings(settings: Settings) -> dict[str, str]:
    """What the kit starts each engine with (as configured here; a server started otherwise may differ)."""
    return {name: f"(as configured: {engine.configured(settings)})" for name, engine in ENGINES.items()}


def print_request(engine: str, mode: str, record: RequestRecord) -> None:
    console.print(request_line(engine, mode, record), markup=False)


async def measure(chosen: Sequence[Endpoint], plan: tuple[Phase, ...], max_tokens: int, writer: ResultsWriter) -> bool:
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
                    run = await run_phase(target, phase, max_tokens, partial(print_request, target.name, phase.mode))
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


def compare(config: Comparison) -> Compared:
    """The seed's prompts, then the matched set one after another and all at once, on every engine in turn."""
    started = datetime.now(UTC)
    settings = {
        "started_at": started.isoformat(timespec="seconds"),
        "n": config.n,
        "max_tokens": config.max_tokens,
        "temperature": TEMPERATURE,
        "warmup_requests_per_engine": 1,
        "engine_settings": {
            target.name: config.engine_settings.get(target.name, f"(named on the command line: {target.base_url})")
            for target in config.engines
        },
    }
    for target in config.engines:
        wait_for_compiled(target.base_url, "The comparison")
    plan = phases(config.n)
    console.print(
        f"Comparing {', '.join(target.name for target in config.engines)}: {len(plan[0].prompts)} seed prompts "
        f"sequentially, then {config.n} matched requests sequentially and concurrently, "
        f"max_tokens {config.max_tokens}. Results: {config.folder}"
    )
    writer = ResultsWriter(config.folder, settings, config.command)
    complete = False
    try:
        complete = asyncio.run(measure(config.engines, plan, config.max_tokens, writer))
    except EndpointError as exc:
        if not writer.runs:
            raise
        writer.notes.append(str(exc))
        err_console.print(f"[bold red]error:[/bold red] {exc}")
    except KeyboardInterrupt:
        writer.notes.append("interrupted by the user")
        console.print("[bold red]interrupted[/bold red]; writing the results gathered so far")
        finish(writer)
        raise
    paths = finish(writer)
    return Compared(writer.document(), complete, paths)


def finish(writer: ResultsWriter) -> list[Path]:
    """The notes on what was measured, the table and the speed-ups shown, and the results' files written."""
    summaries = writer.summaries
    for engine in dict.fromkeys(summary.engine for summary in summaries if "chunks" in summary.tokens_source):
        writer.notes.append(
            f"{engine} sent no usage in its streams: its output tokens are the streamed content "
            "chunks (one token each on llama.cpp's server)"
        )
    if summaries:
        wide = Console(width=max(console.width, TABLE_WIDTH), highlight=False, force_terminal=console.is_terminal)
        wide.print(table(summaries))  # rich assumes 80 columns off a terminal; the table needs more
    written = [writer.write_json(), writer.write_text()]
    plot = writer.write_plot()
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
            f"[bold red]{bad} request(s) truncated, empty or failed[/bold red] (see the table; llama.cpp's "
            "server cuts a running stream short when another request arrives with LLAMACPP_INTERRUPT_REQUESTS=true)"
        )
    console.print(f"Wrote {written[1]}, {written[0]}" + (f", {plot}" if plot else ""))
    return [*written, *([plot] if plot else [])]
