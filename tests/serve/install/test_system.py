"""What a path needs from the operating system is checked before anything long starts, and the host side of the
Docker track runs where Linux's own APIs are absent (macOS, Windows)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from serve.config import machine
from serve.install import system
from serve.processes import process
from tests.conftest import free_port, kit_env, run_bounded

TOOL_NAMES = {"patch": ("patch",), "g++": ("g++",), "cmake": ("cmake",), "gcc": ("gcc",)}


def path_without(names: tuple[str, ...], folder: Path) -> str:
    """A PATH with every program of this one but `names`: one folder of links, first PATH entry wins."""
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name not in names and not link.exists() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return str(folder)


@pytest.mark.parametrize("tool", [system.PATCH, system.CXX], ids=lambda tool: tool.apt)
def test_check_names_each_missing_tool_and_the_command_that_installs_it(tool: system.Tool, tmp_path: Path) -> None:
    path = path_without(tool.commands, tmp_path / "bin")
    needs = [system.PATCH, system.CXX]
    assert system.missing(needs, path) == [tool]
    with pytest.raises(system.MissingTools) as raised:
        system.check(needs, path)
    message = str(raised.value)
    assert f"lacks {tool.commands[0]} ({tool.why})" in message, message
    assert message.endswith(f"apt-get install -y {tool.apt}"), message  # this machine has apt-get
    system.check(needs)  # the real PATH has them all (tests/system-packages.sh installs them)


def test_install_command_is_dnf_on_fedora_and_both_where_neither_is_found(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dnf").write_text("#!/bin/sh\n")
    (bin_dir / "dnf").chmod(0o755)
    assert "dnf install -y patch gcc-c++" in system.install_command([system.PATCH, system.CXX], str(bin_dir))
    both = system.install_command([system.PATCH], str(tmp_path))
    assert "apt-get install -y patch (Debian, Ubuntu)" in both and "dnf install -y patch (Fedora" in both


@pytest.mark.parametrize("missing", ["patch", "g++"])
def test_up_refuses_a_native_start_without_its_tools_before_anything_long(missing: str, tmp_path: Path) -> None:
    port = free_port()
    env = kit_env(RUNTIME="native", VLLM_PORT=str(port), PATH=path_without(TOOL_NAMES[missing], tmp_path / "bin"))
    started = time.monotonic()
    try:
        result = run_bounded(["bash", "up.sh"], env, 120)
    finally:
        run_bounded(["bash", "down.sh"], kit_env(RUNTIME="native", VLLM_PORT=str(port)), 120)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"lacks {missing} (" in errors[0], output
    assert f"apt-get install -y {missing}" in errors[0], errors[0]
    assert "Starting" not in output and "Installing" not in output, output
    assert time.monotonic() - started < 60


def test_enforce_eager_needs_no_compiler(tmp_path: Path) -> None:
    assert system.CXX not in system.native_needs(enforce_eager=True)
    assert system.CXX in system.native_needs(enforce_eager=False)


def test_up_says_how_to_get_python_venv_when_ensurepip_is_missing(tmp_path: Path) -> None:
    """Debian's python3 without python3-venv: a fake stands in (the real package cannot be removed here)."""
    shadow = tmp_path / "no-ensurepip" / "ensurepip"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("No module named ensurepip (fake: python3-venv absent)")\n')
    env = kit_env(PYTHONPATH=str(shadow.parent))
    result = run_bounded(["bash", "up.sh"], env, 60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: python3 cannot create virtual environments (its venv/ensurepip module is missing); install it with: "
        "apt-get install -y python3-venv"
    ], result.stderr


@pytest.mark.parametrize(
    ("os_name", "arch", "ok"),
    [
        ("Linux", "x86_64", True),
        ("Linux", "aarch64", True),
        ("Linux", "arm64", True),
        ("Darwin", "arm64", False),
        ("Windows", "AMD64", False),
        ("Linux", "ppc64le", False),
    ],
)
def test_native_platforms(os_name: str, arch: str, ok: bool) -> None:
    problem = system.native_platform_problem(os_name, arch)
    assert (problem is None) is ok, problem
    if not ok:
        assert "RUNTIME=docker" in problem and os_name in problem


def test_the_docker_tracks_host_code_runs_without_linux_apis(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """macOS has no os.sched_getaffinity, no /proc, no sysfs, and psutil has no cpu_affinity there."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.delattr(psutil.Process, "cpu_affinity", raising=False)
    monkeypatch.setattr(machine, "CPUINFO", tmp_path / "no-proc" / "cpuinfo")
    monkeypatch.setattr(machine, "SYSFS_CPU", tmp_path / "no-sys")
    facts = machine.detect()
    assert facts.usable_cores == psutil.cpu_count() and facts.cpu_flags == frozenset()
    assert facts.memory_available_bytes > 0 and facts.physical_cores is None

    sleeper = process.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "sleep.log", dict(os.environ), tmp_path
    )
    assert process.group_members(sleeper) == [sleeper]
    assert "time.sleep(60)" in process.cmdline(sleeper)
    process.stop_group(sleeper, grace_s=5)
    assert process.group_members(sleeper) == []
