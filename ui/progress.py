"""Long steps with visible progress: a spinner on a terminal, a line every few seconds elsewhere."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.markup import escape

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)  # errors and warnings: stderr, as everywhere
PLAIN_PROGRESS_EVERY_S = 15.0


class StepFailed(RuntimeError):
    """A step of set-up or start failed; the message says which and shows the log's tail."""


@contextmanager
def step(title: str) -> Iterator[Callable[[str], None]]:
    """Yields `update(detail)`; shows title, elapsed seconds and the latest detail until the block ends."""
    started = time.monotonic()
    last_plain = started
    detail = ""

    if console.is_terminal:
        with console.status(title) as status:

            def update(text: str) -> None:
                nonlocal detail
                detail = text or detail
                status.update(f"{title} [dim]{time.monotonic() - started:4.0f} s  {detail[:80]}[/dim]")

            yield update
    else:
        console.print(f"{title} ...")

        def update(text: str) -> None:
            nonlocal detail, last_plain
            detail = text or detail
            now = time.monotonic()
            if now - last_plain >= PLAIN_PROGRESS_EVERY_S:
                last_plain = now
                console.print(f"  ... {now - started:.0f} s  {detail[:100]}")

        yield update
    console.print(f"[green]✓[/green] {title} ({time.monotonic() - started:.0f} s)")


def tail(path: Path, lines: int = 30) -> str:
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""


def run_logged(
    title: str,
    argv: Sequence[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    detail: Callable[[str], bool] = lambda line: True,
) -> None:
    """Run a command, append its output to `log_path`, show progress; raise StepFailed on non-zero exit."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with step(title) as update, log_path.open("a") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            bufsize=1,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if detail(line):
                update(line.strip())
        code = proc.wait()
        if code != 0:
            log.flush()
            raise StepFailed(f"{title} failed (exit {code}). Last lines of {log_path}:\n{tail(log_path)}")


@contextmanager
def in_background(title: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run a command while the block runs (the block shows its own progress); then wait for it, and raise
    StepFailed if it failed. An exception in the block stops it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("a") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
    console.print(f"{title} (in the background) ...")
    try:
        yield
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    code = proc.wait()  # usually done: the block's step is the longer one
    if code != 0:
        raise StepFailed(f"{title} failed (exit {code}). Last lines of {log_path}:\n{tail(log_path)}")
    console.print(f"[green]✓[/green] {title} ({time.monotonic() - started:.0f} s)")


def warn(message: str) -> None:
    """A loud warning on stderr: the command goes on."""
    err_console.print(f"[bold red]warning:[/bold red] {message}", soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one clear error on stderr and leave; used by the command-line entry points."""
    err_console.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True)  # its [brackets] are text
    sys.exit(code)
