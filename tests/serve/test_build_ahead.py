"""LLAMACPP_BUILD_AHEAD: llama.cpp's one-time build runs in the background, an install waits for it, down stops it.

The build itself (minutes of a compiler) runs for real in the llama.cpp server tests' install; here a short-lived
stand-in process holds the build's place (its command line carries the build's marker, as the real one's does), so
what is checked is the kit's handling of a real background process and its pidfile: when one starts, how an
install waits for its wheel, and that down stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from serve.install import llamacpp_venv
from serve.install.venv import Venv
from serve.processes import process
from tests.conftest import ROOT, kit_env, run_script

WHEEL_NAME = f"llama_cpp_python-{llamacpp_venv.LLAMACPP_VERSION}-py3-none-linux_x86_64.whl"


@pytest.fixture
def build_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The wheel folder and the build's pidfile in a scratch folder, not the machine's cache."""
    monkeypatch.setattr(llamacpp_venv, "WHEEL_DIR", tmp_path / "wheels")
    monkeypatch.setattr(llamacpp_venv, "SERVER", tmp_path / "llama-server" / llamacpp_venv.SERVER_TARGET)
    pidfile = process.PidFile(tmp_path / "run" / "llamacpp-wheel-build.pid", llamacpp_venv.BUILD_MODULE)
    monkeypatch.setattr(llamacpp_venv, "BUILD_PIDFILE", pidfile)
    venv = llamacpp_venv.VENV
    monkeypatch.setattr(llamacpp_venv, "VENV", Venv(tmp_path / "llamacpp", venv.label, venv.holds, venv.log_path))
    return tmp_path


def stand_in_build(folder: Path, seconds: float, wheel: Path | None) -> int:
    """A real background process in the build's place: it sleeps, then leaves `wheel` (if any), and exits."""
    script = f"import time, pathlib, sys; time.sleep({seconds})\nif sys.argv[2]: pathlib.Path(sys.argv[2]).touch()"
    argv = [sys.executable, "-c", script, llamacpp_venv.BUILD_MODULE, str(wheel or "")]
    pid = process.spawn(argv, folder / "build.log", {}, ROOT)
    llamacpp_venv.BUILD_PIDFILE.write(pid)
    return pid


def test_nothing_starts_once_the_wheel_and_the_server_are_built(build_places: Path) -> None:
    llamacpp_venv.WHEEL_DIR.mkdir(parents=True)
    (llamacpp_venv.WHEEL_DIR / WHEEL_NAME).touch()
    llamacpp_venv.SERVER.parent.mkdir(parents=True)
    llamacpp_venv.SERVER.touch()  # one build makes both: with both there, nothing is left to build
    assert llamacpp_venv.start_background_build() is None
    assert not llamacpp_venv.BUILD_PIDFILE.path.exists()


def test_nothing_starts_on_a_machine_without_a_compiler(build_places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(build_places / "empty-bin"))
    assert llamacpp_venv.start_background_build() is None
    assert not llamacpp_venv.BUILD_PIDFILE.path.exists()


def test_an_install_waits_for_the_build_then_finds_its_wheel(build_places: Path) -> None:
    llamacpp_venv.WHEEL_DIR.mkdir(parents=True)
    stand_in_build(build_places, 2.0, llamacpp_venv.WHEEL_DIR / WHEEL_NAME)
    assert llamacpp_venv.background_build_pid() is not None
    assert llamacpp_venv.start_background_build() is None  # one build at a time
    started = time.monotonic()
    llamacpp_venv.wait_for_background_build()
    assert time.monotonic() - started >= 1.0
    assert llamacpp_venv.built_wheel() == str(llamacpp_venv.WHEEL_DIR / WHEEL_NAME)
    assert llamacpp_venv.background_build_pid() is None and not llamacpp_venv.BUILD_PIDFILE.path.exists()


def test_stopping_it_ends_the_whole_build(build_places: Path) -> None:
    pid = stand_in_build(build_places, 600.0, None)
    assert llamacpp_venv.stop_background_build() == pid
    assert process.group_members(pid) == []
    assert llamacpp_venv.stop_background_build() is None


def test_the_portable_build_leaves_out_what_a_text_model_never_loads() -> None:
    """libmtmd (images, audio) is imported lazily by llama_cpp's multimodal chat handlers only."""
    assert "-DLLAVA_BUILD=OFF" in llamacpp_venv.PORTABLE_CMAKE_ARGS.split()
    assert "-DGGML_NATIVE=OFF" in llamacpp_venv.PORTABLE_CMAKE_ARGS.split()


@pytest.mark.server
def test_down_stops_a_build_up_left_running(tmp_path: Path) -> None:
    """The real down.sh, with a stand-in build recorded in this checkout's run folder: stopped, and said."""
    pidfile = llamacpp_venv.BUILD_PIDFILE
    if pidfile.live_group() is not None:
        pytest.skip("a real background build of this checkout is running; not stopping it for a test")
    argv = [sys.executable, "-c", "import time; time.sleep(600)", llamacpp_venv.BUILD_MODULE]
    pid = process.spawn(argv, tmp_path / "build.log", {}, ROOT)
    pidfile.write(pid)
    try:
        result = run_script("down.sh", kit_env())
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"Stopped llama.cpp's build in the background (pid {pid})" in result.stdout
        assert process.group_members(pid) == []
    finally:
        # os.killpg, not `kill -9 -PID`: procps-ng 4.0.2's kill (Debian 12) took that for -1, every process
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        pidfile.remove()


YIELDS = """
import os, sys
from serve.processes import process
process.yield_the_cpu()
group = open("/proc/self/autogroup").read().split() if os.path.exists("/proc/self/autogroup") else []
print(os.getpriority(os.PRIO_PROCESS, 0), group[-1] if group else "none")
"""


def test_a_background_job_yields_the_cpu_to_other_sessions_too(tmp_path: Path) -> None:
    """The build runs in a session of its own (process.spawn). Where the kernel schedules sessions as autogroups, its
    nice orders it only within that session: its autogroup's nice must drop too, or it takes a core from vLLM's
    first start whatever its own nice says."""
    log = tmp_path / "yield.log"
    pid = process.spawn([sys.executable, "-c", YIELDS], log, {**os.environ, "PYTHONPATH": str(ROOT)}, ROOT)
    deadline = time.monotonic() + 60
    while process.group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    nice, group_nice = log.read_text().split()
    assert nice == str(process.LOWEST_NICE), log.read_text()
    assert group_nice == (str(process.LOWEST_NICE) if Path("/proc/self/autogroup").exists() else "none")


def test_the_build_module_yields_before_it_builds() -> None:
    source = Path(llamacpp_venv.__file__).read_text()
    main = source[source.index('if __name__ == "__main__":') :]
    assert main.index("process.yield_the_cpu()") < main.index("build_in_background(")
