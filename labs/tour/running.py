"""How the tour runs a command (up.sh, down.sh, the teaching engine in its own venv): its output shown as it comes,
its failure one line for its section (the command and its last lines). The labs themselves are functions the
sections call (their errors are their section's line).
"""

from __future__ import annotations

import subprocess
from collections import deque
from collections.abc import Sequence

from serve.config.paths import ROOT
from ui.progress import console

TAIL_LINES = 12  # what a failed command leaves in its section of the report
UP_TIMEOUT_S = 1800  # a first start compiles the model (minutes on two cores)


class LabFailed(RuntimeError):
    """A section could not measure what it needs (a lab's input missing); the message says why."""


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
