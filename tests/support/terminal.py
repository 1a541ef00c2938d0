"""A real terminal for interactive commands: a tmux session on a socket of its own, keys sent, the pane read."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

TMUX_TIMEOUT_S = 30
POLL_S = 0.2
EXIT_MARK = "TERMINAL-EXIT="  # printed after the command ends, with its exit code


class Terminal:
    """One tmux pane running `argv` (then `echo TERMINAL-EXIT=$?` and a pause, so its last words stay readable)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: Path, width: int = 160) -> None:
        self.socket = f"kit-tests-{os.getpid()}-{time.monotonic_ns()}"
        shell = f"{shlex.join(argv)}; echo {EXIT_MARK}$?; sleep 600"
        self._tmux(
            "new-session",
            "-d",
            "-x",
            str(width),
            "-y",
            "50",
            "-c",
            str(cwd),
            "bash",
            "-c",
            shell,
            env={**env, "TERM": "xterm-256color"},
        )

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=TMUX_TIMEOUT_S, env=env
        )
        if result.returncode != 0:
            pytest.fail(f"tmux {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def send(self, *keys: str) -> None:
        """tmux key names (Enter, C-c, C-d) or literal text."""
        self._tmux("send-keys", *keys)

    def type_line(self, text: str) -> None:
        self._tmux("send-keys", "-l", text)
        self._tmux("send-keys", "Enter")

    @property
    def text(self) -> str:
        """Everything the pane showed, wrapped lines joined."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-")

    def wait_for(self, done: Callable[[str], bool], timeout_s: float, what: str) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done(text := self.text):
                return text
            time.sleep(POLL_S)
        pytest.fail(f"the terminal never showed {what} within {timeout_s:g} s; it shows:\n{self.text}")

    def exit_code(self, timeout_s: float) -> int:
        text = self.wait_for(lambda shown: EXIT_MARK in shown, timeout_s, "the command's end")
        return int(text.split(EXIT_MARK)[1].split()[0])

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=TMUX_TIMEOUT_S)


@contextmanager
def terminal(argv: Sequence[str], env: dict[str, str], cwd: Path) -> Iterator[Terminal]:
    session = Terminal(argv, env, cwd)
    try:
        yield session
    finally:
        session.close()
