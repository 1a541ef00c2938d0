"""How the tour runs things: a lab in this process (its `main(argv)`, as `python -m` would), or a command (up.sh,
down.sh, the teaching engine in its own venv) with its output shown as it comes; either one's failure is one
line for its section: the lab's own error line, or the command and its last lines.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import redirect_stderr
from typing import Any

from serve.config.paths import ROOT
from ui.progress import console

TAIL_LINES = 12  # what a failed command leaves in its section of the report
UP_TIMEOUT_S = 1800  # a first start compiles the model; a first install of llama.cpp builds it
INTERRUPTED = 130  # the exit code of a lab stopped by Ctrl-C


class LabFailed(RuntimeError):
    """A lab the tour ran did not finish; the message is its own last error line."""


class CommandFailed(RuntimeError):
    """A command the tour ran exited non-zero; the message is the command and its last lines."""


def run(argv: Sequence[str], env: dict[str, str] | None = None, timeout_s: float = UP_TIMEOUT_S) -> list[str]:
    """Run a command with its output shown as it comes; its last lines, or CommandFailed with them."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    process = subprocess.Popen(
        list(argv), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    try:
        for line in process.stdout or ():
            console.print(f"  [dim]│[/dim] {line.rstrip()}", markup=True, highlight=False)
            tail.append(line.rstrip())
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        raise CommandFailed(f"`{' '.join(argv)}` still ran after {timeout_s:.0f} s and was stopped") from None
    if code != 0:
        raise CommandFailed(f"`{' '.join(argv)}` exited with {code}: " + " / ".join(line for line in tail if line))
    return list(tail)


class Tee(io.TextIOBase):
    """stderr as it was, and a copy: a lab's error line is shown as usual and kept for its section."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


def last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(it printed nothing on stderr)"])[-1]


def lab(name: str, main: Callable[[list[str]], int], argv: list[str]) -> None:
    """Run a lab's `main(argv)` here, as `python -m name argv` would; LabFailed with its error line if it fails."""
    tee = Tee(sys.stderr)
    try:
        with redirect_stderr(tee):
            code = main(argv)
    except SystemExit as exc:  # the labs' fail(): one line on stderr, then exit
        code = exc.code if isinstance(exc.code, int) else 1
    if code == INTERRUPTED:  # a lab that caught Ctrl-C wrote what it had: the tour stops too
        raise KeyboardInterrupt
    if code != 0:
        raise LabFailed(f"python -m {name} exited with {code}: {last_error(tee.copy.getvalue())}")
