"""Docs cannot lie: the commands in README.md and labs/*.md, extracted so that tests run them.

Every line of a ```bash block is a command (a trailing backslash continues it). Tests retarget the
documented ports to the servers the harness started, run each command, and check its output.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, free_port, run_bounded

BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
ENGINE_PORT = 8012  # the teaching engine's server on labs/engine.md and labs/contract.md
ENGINE_SERVER = "-m labs.engine.server"
ENGINE_START_TIMEOUT_S = 180
ENGINES_PAGE = "serve/engines/README.md"  # the runtimes in depth: the Ollama compose profile's commands, the flags


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
    """The Docker tracks' commands: tests/serve/engines/test_docker_runtime.py runs them against a stand-in docker."""
    return "RUNTIME=docker" in command or command.startswith("docker ")


def run_doc(
    command: str, env: dict[str, str], timeout_s: float = 900, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """A documented command in bash (in `cwd`, a clone's root for instance); a hang fails the test and stops all
    it started (background clients too)."""
    return run_bounded(["bash", "-c", command], env, timeout_s, cwd=cwd)


def start_engine(command: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """The teaching engine's server command in the background (the page's "in another terminal"), once healthy."""
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command} --threads 1"],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    port = int(command.split("--port")[1].split()[0])
    deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    pytest.fail(f"{command} did not become healthy in {ENGINE_START_TIMEOUT_S} s")


def run_page(
    commands: list[str], env: dict[str, str], ports: dict[int, int], sized: Callable[[int, str, str], str]
) -> dict[str, subprocess.CompletedProcess[str]]:
    """A page's commands in order, retargeted to `ports` and cut down by sized(index, command, retargeted); each
    must exit 0. The teaching engine's server command is started in the background on a free port instead of
    ENGINE_PORT, and stopped once the rest have run. Returns each documented command's result."""
    engine_port = free_port()
    engine: subprocess.Popen[str] | None = None
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    try:
        for index, command in enumerate(commands):
            actual = retarget(command, {**ports, ENGINE_PORT: engine_port}).replace(
                f"--port {ENGINE_PORT}", f"--port {engine_port}"
            )
            if ENGINE_SERVER in command:
                engine = start_engine(actual, env)
                continue
            actual = sized(index, command, actual)
            result = run_doc(actual, env, timeout_s=600)
            assert result.returncode == 0, f"{actual}\n{result.stdout}\n{result.stderr}"
            outputs[command] = result
    finally:
        if engine is not None:
            engine.send_signal(signal.SIGINT)
            engine.wait(timeout=30)
    return outputs


def all_doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / ENGINES_PAGE, *sorted((ROOT / "labs").glob("*.md"))]


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
