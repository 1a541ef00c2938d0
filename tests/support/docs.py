"""Docs cannot lie: the commands in README.md and labs/*.md, extracted so that tests run them.

Every line of a ```bash block is a command (a trailing backslash continues it). Tests retarget the
documented ports to the servers the harness started, run each command, and check its output.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT, run_bounded

BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def doc_commands(relative_path: str) -> list[str]:
    text = (ROOT / relative_path).read_text()
    commands: list[str] = []
    for block in BASH_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def retarget(command: str, ports: dict[int, int]) -> str:
    """Point documented ports (8009, 11434 ...) at the test servers' ports."""
    for documented, actual in ports.items():
        command = re.sub(rf"(?<=[:=]){documented}\b", str(actual), command)
    return command


def is_docker_command(command: str) -> bool:
    """The Docker tracks' commands: tests/serve/test_docker_runtime.py runs them against a stand-in docker."""
    return "RUNTIME=docker" in command or command.startswith("docker ")


def run_doc(
    command: str, env: dict[str, str], timeout_s: float = 900, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """A documented command in bash (in `cwd`, a clone's root for instance); a hang fails the test and stops all
    it started (background clients too)."""
    return run_bounded(["bash", "-c", command], env, timeout_s, cwd=cwd)


def all_doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "labs").glob("*.md"))]


EXAMPLE = re.compile(r"^```bash\n([^\n]*)\n```\n\n```text\n(.*?)^```", re.S | re.M)


def doc_examples(relative_path: str) -> dict[str, list[str]]:
    """One-command ```bash blocks followed directly by a ```text block: command -> the lines shown."""
    text = (ROOT / relative_path).read_text()
    return {
        command.strip(): [line for line in shown.splitlines() if line.strip()]
        for command, shown in EXAMPLE.findall(text)
    }


def shows(output: str, lines: list[str]) -> list[str]:
    """The shown lines missing from output (whitespace-normalized, whole lines); empty when docs tell the truth."""
    actual = {" ".join(line.split()) for line in output.splitlines()}
    return [line for line in lines if " ".join(line.split()) not in actual]
