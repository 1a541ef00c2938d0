"""python -m labs.tour [--quick]: the course's experiments in the course's order, against the running kit, and
one HTML report of them all (results/tour-<UTC time>/index.html, tour.json beside it).

The engines a section needs and that do not answer are started through the kit's up.sh and stopped through its
down.sh (said before either); a section that fails is reported in its place and the tour goes on.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from client.endpoint import ENDPOINT_SPEC, EndpointError
from labs import results
from labs.tour import report, sections
from labs.tour.catalogue import PARTS, estimate_s
from labs.tour.engines import KitEngines, OllamaClass, ollama_class
from labs.tour.outline import Section
from labs.tour.report import SectionResult, Status, Tour
from serve.config.paths import ROOT
from serve.config.settings import Settings
from ui.cli import KitArgumentParser
from ui.progress import console, fail
from ui.values import SettingsError

RESULTS_DIR = ROOT / "results"
LSCPU_KEYS = ("Model name", "CPU(s)", "Core(s) per socket", "Thread(s) per core", "Socket(s)")
SCALE_LIMITS = (0.5, 3.0)  # how far the steps so far may rescale the estimate of the rest


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(prog="python -m labs.tour", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, the same sections")
    parser.add_argument("--out", type=Path, help="the report's folder (default results/tour-<UTC time>)")
    parser.add_argument(
        "--endpoint",
        metavar=ENDPOINT_SPEC,
        help="the engine beside vLLM (default: your Ollama where one answers holding a model, else the kit's "
        "llama.cpp server), e.g. ollama=http://127.0.0.1:11434/v1@smollm2:135m",
    )
    parser.add_argument("--report", type=Path, metavar="FOLDER", help="draw a recorded tour's report again, and stop")
    return parser.parse_args(argv)


def lscpu() -> dict[str, str]:
    """The machine as lscpu says it: model, CPUs and cores, and the ISA extensions the labs' kernels care about."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())}
    shown = {key: fields[key] for key in LSCPU_KEYS if key in fields}
    flags = set(fields.get("Flags", "").split())
    shown["ISA"] = " ".join(flag for flag in results.ISA_FLAGS if flag in flags) or "none of " + ", ".join(
        results.ISA_FLAGS
    )
    return shown


class Progress:
    """One line before every step: which, how many are done, and the time left (the estimates, rescaled)."""

    def __init__(self, steps: list[str], quick: bool) -> None:
        self.steps, self.quick = steps, quick
        self.started_s = time.monotonic()
        self.done_estimate_s = 0.0

    def step(self, index: int, label: str) -> None:
        elapsed = time.monotonic() - self.started_s
        scale = (
            min(max(elapsed / self.done_estimate_s, SCALE_LIMITS[0]), SCALE_LIMITS[1]) if self.done_estimate_s else 1
        )
        left = scale * sum(estimate_s(step, self.quick) for step in self.steps[index:])
        console.print(
            f"\n[bold]── tour {index + 1}/{len(self.steps)}[/bold] · {label} · {elapsed:.0f} s so far, "
            f"about {max(left / 60, 1):.0f} min left"
        )

    def finished(self, step: str) -> None:
        self.done_estimate_s += estimate_s(step, self.quick)


def run_section(section: Section, measure: Callable[[], dict[str, Any]]) -> SectionResult:
    started = time.monotonic()
    try:
        data = measure()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a failed step is reported in its section and the tour goes on
        message = str(exc) or exc.__class__.__name__
        console.print(f"[bold red]tour: {section.value} failed[/bold red]: {message}; going on with the next section")
        return SectionResult(section, Status.FAILED, time.monotonic() - started, error=message)
    return SectionResult(section, Status.OK, time.monotonic() - started, data)


def tour(args: argparse.Namespace, settings: Settings, beside: OllamaClass, folder: Path, command: str) -> Tour:
    engines = KitEngines(settings, beside)
    console.print(f"[bold]tour:[/bold] beside vLLM: {engines.beside.described}")
    ctx = sections.Context(folder, settings, engines, command)
    record = Tour(args.quick, lscpu(), [SectionResult(section, Status.NOT_RUN) for section in Section])
    envelope = results.Envelope.now(command)
    steps: list[str] = ["engines", *Section, "stop"]
    progress = Progress(steps, args.quick)
    started = time.monotonic()
    try:
        progress.step(0, f"the engines: vLLM and, beside it, {engines.beside.name}")
        try:
            engines.ensure(engines.beside.kit_engines)
        except Exception as exc:  # each section that needs the engine says so in its place
            record.notes.append(f"the engines did not all start: {exc}")
        progress.finished("engines")
        for index, section in enumerate(Section, start=1):
            part = PARTS[section]
            progress.step(index, part.title)
            result = run_section(section, partial(part.run, ctx, args.quick))
            record.sections[index - 1] = result  # Section's order
            if result.status is Status.OK:
                ctx.measured[section] = result.data
            progress.finished(section)
            record.seconds = time.monotonic() - started
            report.write(folder, envelope, record)  # after every section: a stopped tour keeps its report
    finally:
        progress.step(len(steps) - 1, "stopping what the tour started")
        record.notes += [f"started {name} through up.sh, stopped it through down.sh" for name in engines.started]
        engines.stop_started()
        record.seconds = time.monotonic() - started
        report.write(folder, envelope, record)
    return record


def stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM stops the tour as Ctrl-C does: the engines it started are stopped, the report so far is kept."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    if args.report:
        try:
            console.print(f"wrote {report.report(args.report)}")
        except results.ResultsError as exc:
            fail(str(exc), code=2)
        return 0
    try:
        settings = Settings.load()
        beside = ollama_class(settings, args.endpoint)
    except (SettingsError, EndpointError) as exc:
        fail(str(exc), code=2)
    folder = args.out or RESULTS_DIR / f"tour-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    command = results.command_line("python -m labs.tour", sys.argv[1:] if argv is None else argv)
    console.print(
        f"[bold]The tour[/bold]{' (quick)' if args.quick else ''}: six sections in the course's order, against "
        f"vLLM at {settings.base_url}; the report goes to {folder / report.REPORT_HTML}"
    )
    try:
        record = tour(args, settings, beside, folder, command)
    except KeyboardInterrupt:
        console.print(f"[bold red]interrupted[/bold red]; the report so far is {folder / report.REPORT_HTML}")
        return 130
    failed = [item.section.value for item in record.sections if item.status is not Status.OK]
    console.print(
        f"wrote {folder / report.REPORT_HTML} ({record.seconds:.0f} s)"
        + (f"; failed: {', '.join(failed)} (each says why in its section)" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
