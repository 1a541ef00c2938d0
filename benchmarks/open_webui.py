"""Open WebUI on a machine that never had it: its venv's install, step by step, and its first and second start.

    .venv/bin/python -m benchmarks.open_webui               # this machine's pip configuration
    .venv/bin/python -m benchmarks.open_webui --stock-pip   # as a user's machine: PyPI + a torch index only

In a fresh clone (benchmarks/fresh_machine.py) with every cache empty, it makes the light tools, then installs Open
WebUI's venv as up.sh does (`python -m serve.install.open_webui_venv`), timing each step the install prints, the
bytes the network interfaces received meanwhile (the machine's counters: other traffic included) and what the venv
holds; then it starts Open WebUI the way up.sh does after the engines (serve/webui/open_webui.py), on a free port
and a new data folder, to /health, stops it, and starts it again (--starts in all: the later ones find its database
made and its bytecode cached). No engine is needed for that: Open WebUI reaches its connections per request.
`--stock-pip` switches this machine's pip configuration off and serves torch's CPU wheel from a stand-in for
PyTorch's index on 127.0.0.1 (its bytes are the loopback's, not counted), so every other package comes from PyPI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from benchmarks.first_token import STEP_LINE, empty_caches_env, timed_lines
from benchmarks.fresh_machine import fresh_clone, stock_pip_with_torch_index, torch_wheel
from labs.results import Envelope, command_line, write
from serve.config.paths import ROOT
from serve.processes.process import free_port
from ui.cli import KitArgumentParser, positive_int
from ui.progress import console, err_console

INSTALL_TIMEOUT_S = 3600
START_TIMEOUT_S = 900
DEFAULT_OUT = ROOT / "results" / "open_webui"
NET_DEV = Path("/proc/net/dev")
# up.sh's own call, after the engines: the runtime of the settings, started (installed first if needed) or stopped
SETTINGS = "from serve.config.settings import Settings; from serve.webui import open_webui as o; s = Settings.load()"
START = f"{SETTINGS}; o.wanted(s).start()"
STOP = f"{SETTINGS}; o.stop(s)"
UP_LINE = "✓ Open WebUI is up in "
STEPS = {"venv": "Creating the Open WebUI venv", "torch": "Installing torch", "open_webui": "Installing open-webui"}


def received_bytes() -> int:
    """Bytes received so far on every interface but the loopback (/proc/net/dev)."""
    total = 0
    for line in NET_DEV.read_text().splitlines()[2:]:
        name, _, counters = line.partition(":")
        if name.strip() != "lo":
            total += int(counters.split()[0])
    return total


def folder_bytes(folder: Path) -> int:
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> list[tuple[float, str]]:
    code, lines = timed_lines(argv, env, cwd, timeout_s)
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} ... failed ({code})")
    return lines


def start_s(clone: Path, env: dict[str, str]) -> float:
    """The seconds Open WebUI took to /health, as its start prints them (launch to healthy)."""
    lines = run([".venv/bin/python", "-c", START], env, clone, START_TIMEOUT_S)
    up = [line for _, line in lines if line.startswith(UP_LINE)]
    if not up:
        raise RuntimeError("the start printed no 'Open WebUI is up' line")
    return float(up[0].removeprefix(UP_LINE).split()[0])


@dataclass(frozen=True, slots=True)
class Measured:
    """One fresh install of Open WebUI and its timed starts."""

    install: list[tuple[float, str]]  # the installer's output lines, each at its second
    received_bytes: int
    venv: Path
    packages: list[str]
    starts_s: list[float]
    load_before: float  # 1-minute load average before the install
    load_after: float  # ... and after the starts


def install_and_start(clone: Path, env: dict[str, str], scratch: Path, stock_pip: bool, num_starts: int) -> Measured:
    """Install Open WebUI's venv in a fresh clone (with stock pip: PyPI and a stand-in torch index), then start it
    `num_starts` times to /health, stopping it after each; RuntimeError for a step that failed."""
    with ExitStack() as stack:
        if stock_pip:
            env = stack.enter_context(stock_pip_with_torch_index(env, scratch))
        run(["bash", "serve/light-tools.sh"], env, clone, INSTALL_TIMEOUT_S)
        load_before = os.getloadavg()
        received = received_bytes()
        install = run([".venv/bin/python", "-m", "serve.install.open_webui_venv"], env, clone, INSTALL_TIMEOUT_S)
        received = received_bytes() - received
        venv = clone / ".kit" / "open-webui"
        packages = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        starts: list[float] = []
        try:
            for _ in range(num_starts):
                starts.append(start_s(clone, env))
                run([".venv/bin/python", "-c", STOP], env, clone, 120)
        finally:
            subprocess.run([".venv/bin/python", "-c", STOP], cwd=clone, env=env, capture_output=True, timeout=120)
        return Measured(install, received, venv, packages, starts, load_before[0], os.getloadavg()[0])


def print_table(measured: Measured, timed: dict[str, float], install_s: float, venv_gib: float) -> None:
    starts = measured.starts_s
    table = Table(title="Open WebUI on a machine that never had it (empty caches)")
    table.add_column("")
    table.add_column("", justify="right")
    for title, seconds in timed.items():
        table.add_row(title, f"{seconds:.0f} s")
    table.add_row("the install, in all", f"{install_s:.0f} s", style="bold")
    table.add_row("received meanwhile (all interfaces but lo)", f"{measured.received_bytes / 1e6:.0f} MB")
    table.add_row(f"the venv: {len(measured.packages)} packages", f"{venv_gib:.2f} GiB")
    table.add_row("first start to /health (it creates its database)", f"{starts[0]:.0f} s", style="bold")
    for number, seconds in enumerate(starts[1:], 2):
        table.add_row(f"start {number} to /health", f"{seconds:.0f} s")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(
        prog="python -m benchmarks.open_webui",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stock-pip", action="store_true", help="PyPI and a stand-in torch index only")
    parser.add_argument("--starts", type=positive_int, default=4, help="starts to time, the first included")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="kit-open-webui-"))
    clone = fresh_clone(scratch / "clone")
    env = {**empty_caches_env(scratch, free_port()), "OPEN_WEBUI": "true", "OPEN_WEBUI_PORT": str(free_port())}
    try:
        measured = install_and_start(clone, env, scratch, args.stock_pip, args.starts)
    except RuntimeError as exc:
        err_console.print(f"[bold red]error:[/bold red] {exc}")
        return 1
    install, starts = measured.install, measured.starts_s
    timed = {match["title"]: float(match["seconds"]) for _, line in install if (match := STEP_LINE.search(line))}
    steps = {key: seconds for key, head in STEPS.items() for title, seconds in timed.items() if title.startswith(head)}
    result = {
        "stock_pip": args.stock_pip,
        "install_s": install[-1][0] if install else 0.0,
        "steps_s": steps,
        "downloaded_mb": measured.received_bytes / 1e6,
        "torch_wheel_mb": torch_wheel().stat().st_size / 1e6 if args.stock_pip else None,
        "venv_gib": folder_bytes(measured.venv) / 2**30,
        "packages": len(measured.packages),
        "first_start_s": starts[0],
        "later_starts_s": starts[1:],
        "later_start_median_s": statistics.median(starts[1:]) if starts[1:] else None,
        "load_average_1m": {"before_install": measured.load_before, "after_starts": measured.load_after},
    }
    print_table(measured, timed, result["install_s"], result["venv_gib"])
    command = command_line("python -m benchmarks.open_webui", sys.argv[1:] if argv is None else argv)
    console.print(f"wrote {write(args.out / 'results.json', Envelope.now(command), result)}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
