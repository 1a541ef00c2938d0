"""The one venv installer (serve/install/venv.py): a venv is trusted only with today's stamp, written last."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from serve.config.paths import ROOT
from serve.install import llamacpp_venv, router_venv, vllm_venv
from serve.install.venv import Venv
from ui.progress import StepFailed


def test_the_engines_venvs_and_stamps_stay_where_earlier_installs_put_them() -> None:
    """An install an earlier kit made is found (tests/support/docker/standin.sh reads the vLLM stamp by path)."""
    assert {
        venv.folder.relative_to(ROOT).as_posix(): venv.stamp.name
        for venv in (vllm_venv.VENV, llamacpp_venv.VENV, router_venv.VENV)
    } == {".kit/vllm": ".kit-installed", ".kit/llamacpp": ".kit-installed", ".kit/router": ".kit-installed"}
    assert router_venv.VENV.wanted == f"vllm-router=={router_venv.ROUTER_VERSION}\n"  # one requirement a line


def test_a_venv_is_trusted_only_with_todays_stamp_and_reinstalls_after_a_failure(tmp_path: Path) -> None:
    folder = tmp_path / "tool"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)  # made, not filled
    venv = Venv(folder, "tool", ("tool==1.0", "model==2"), tmp_path / "logs" / "install-tool.log")
    assert venv.python.exists() and not venv.installed()
    venv.log_path.parent.mkdir()
    venv.log_path.write_text("the last install's output\n")
    filled: list[str] = []
    assert venv.install(lambda: filled.append(venv.log_path.read_text() if venv.log_path.exists() else "")) is True
    assert filled == [""]  # the log starts afresh; the venv already there is reused, not made again
    assert venv.stamp.read_text() == "tool==1.0\nmodel==2\n" and venv.installed()
    assert venv.install(lambda: filled.append("again")) is False and filled == [""]

    newer = dataclasses.replace(venv, holds=("tool==1.1", "model==2"))
    assert not newer.installed()  # a pin changed since: installs again into the same venv

    def cut_short() -> None:
        raise StepFailed("Installing tool==1.1 failed (exit 1)")

    with pytest.raises(StepFailed):
        newer.install(cut_short)
    assert not newer.installed()  # the stamp is written last: the next install tries again
    assert newer.install(lambda: None) is True and newer.stamp.read_text() == "tool==1.1\nmodel==2\n"
    venv.python.unlink()
    assert not newer.installed()  # a stamp without its python is not trusted


def test_two_installs_of_a_venv_at_once_fill_it_once(tmp_path: Path) -> None:
    """tests/run.sh installs llama.cpp in the background while a test's `up` may ask for the same venv; two clones'
    `up` may build the same wheel. A second install waits on the first's lock, then finds the stamp and fills
    nothing. The first here is a real second process, holding its install (and the lock) for two seconds."""
    folder = tmp_path / "tool"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    log = tmp_path / "logs" / "install-tool.log"
    log.parent.mkdir()
    first = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from serve.install.venv import Venv\n"
            "venv = Venv(Path(sys.argv[1]), 'tool', ('tool==1.0',), Path(sys.argv[2]))\n"
            "venv.install(lambda: (print('filling', flush=True), time.sleep(2)))",
            str(folder),
            str(log),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None and first.stdout.readline() == "filling\n"  # it holds the lock now
        venv = Venv(folder, "tool", ("tool==1.0",), log)
        filled: list[str] = []
        assert venv.install(lambda: filled.append("second")) is False
        assert filled == [] and venv.installed() and first.wait(timeout=30) == 0
    finally:
        first.kill()
        first.wait()
