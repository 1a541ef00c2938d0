"""How the tour runs a command (up.sh, down.sh, the teaching engine in its own venv): its output shown as it comes,
its failure one line for its section (the command and its last lines). The labs themselves are functions the
sections call (their errors are their section's line).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from serve.config.paths import ROOT
from ui.progress import console

TAIL_LINES = 12  # what a failed command leaves in its section of the report
UP_TIMEOUT_S = 1800  # a first start compiles the model; a first install of llama.cpp builds it


class LabFailed(RuntimeError):
    """A section could not measure what it needs (a lab's input missing); the message says why."""


class CommandFailed(RuntimeError):
    """A command the tour ran exited non-zero; the message is the command and its last lines."""


def run(argv: Sequence[str], env: dict[str, str] | None = None, timeout_s: float = UP_TIMEOUT_S) -> list[str]:
    """Run a command with its output shown as it comes; its last lines, or CommandFailed with them."""
    return started(argv, env).wait(timeout_s)


@dataclass(slots=True)
class Running:
    """A command the tour started: its output shown as it comes (each line after its `label`, when it has one, to
    read apart from another command's), its last lines kept."""

    argv: list[str]
    process: subprocess.Popen[str]
    label: str = ""
    started_s: float = field(default_factory=time.monotonic)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    reader: threading.Thread | None = None

    def show(self) -> None:
        for line in self.process.stdout or ():
            console.print(f"  [dim]│{self.label}[/dim] {line.rstrip()}", markup=True, highlight=False)
            self.tail.append(line.rstrip())

    def left_s(self, timeout_s: float) -> float:
        return max(0.0, timeout_s - (time.monotonic() - self.started_s))

    def wait(self, timeout_s: float = UP_TIMEOUT_S) -> list[str]:
        """Its last lines once it exited 0; CommandFailed with them when it did not, or when it ran past `timeout_s`
        (from its start)."""
        command = " ".join(self.argv)
        try:
            if self.reader is None:
                self.show()
            else:
                self.reader.join(self.left_s(timeout_s))
            code = self.process.wait(self.left_s(timeout_s))
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise CommandFailed(f"`{command}` still ran after {timeout_s:.0f} s and was stopped") from None
        if code != 0:
            raise CommandFailed(f"`{command}` exited with {code}: " + " / ".join(line for line in self.tail if line))
        return list(self.tail)


def started(argv: Sequence[str], env: dict[str, str] | None = None, label: str = "") -> Running:
    """Start a command in the repository's root. With a `label`, its output is shown from a thread of its own while
    the tour goes on (`wait()` joins it); without, `wait()` shows it."""
    process = subprocess.Popen(
        list(argv),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    running = Running(list(argv), process, f" {label}" if label else "")
    if label:
        running.reader = threading.Thread(target=running.show, name=f"tour: {label}", daemon=True)
        running.reader.start()
    return running
