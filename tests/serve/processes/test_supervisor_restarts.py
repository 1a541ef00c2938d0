"""Crashes on the native runtime: no orphans (stop and status act on the recorded process group), the restart
policy (serve/processes/supervisor.py), and `status` telling a crash from a stop.

One real vLLM (eager, a 1 GiB KV budget) goes through it all: an orphaned group planted on its port first,
a SIGKILL of its API server (restarted by the kit), then a crash loop (its port taken while it restarts).
A dead leader whose group lives on is a fault the kit's own servers no longer produce (the engine plugin
kills the engine with its API server), so the first test makes one from plain processes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from serve.config.vllm_flags import API_SERVER_MODULE
from serve.processes import process
from serve.processes.local_server import RUN_DIR
from serve.processes.supervisor import Record, next_step, root_cause
from tests.conftest import ROOT, bring_up, free_port, kit_env, run_bounded, run_script
from tests.support.waiting import wait_until


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def plant_orphan(port: int) -> tuple[int, int]:
    """A process group recorded as vLLM's on `port` whose leader died and whose child lives on: (leader, child)."""
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; child = subprocess.Popen(['sleep', "
            "'600']); print(child.pid, flush=True); sys.stdin.readline()",
            API_SERVER_MODULE,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert leader.stdout is not None and leader.stdin is not None
    child = int(leader.stdout.readline())
    process.PidFile(RUN_DIR / f"vllm-{port}.pid", API_SERVER_MODULE).write(leader.pid)
    leader.stdin.close()  # the leader exits; its child stays in the group
    leader.wait()
    return leader.pid, child


def server_processes(pidfile: process.PidFile, record_path: Path) -> tuple[int, int, list[int]]:
    """The started server's process group, its API server (as the supervisor recorded it) and the engine's
    processes beside them in the group."""
    group = pidfile.pid()
    assert group is not None
    record = Record.load(record_path)
    assert record is not None and record.server_pid is not None
    api_server = record.server_pid
    return group, api_server, [pid for pid in process.group_members(group) if pid not in (group, api_server)]


def assert_left_nothing(down: subprocess.CompletedProcess[str], seen: list[int], group: int | None, port: int) -> None:
    """down.sh succeeded and nothing it should have stopped lives on: no process seen, no group member, the port."""
    assert down.returncode == 0, down.stdout + down.stderr
    assert [pid for pid in seen if alive(pid)] == []
    assert group is None or process.group_members(group) == []
    assert process.port_is_free("127.0.0.1", port)


def status(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_bounded([str(ROOT / ".venv" / "bin" / "python"), "-m", "serve", "status"], env, 60)


def test_a_group_whose_leader_died_is_named_by_status_and_stopped_by_down() -> None:
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native")
    leader, child = plant_orphan(port)
    try:
        seen = status(env)
        assert seen.returncode == 1 and "vLLM orphaned" in seen.stdout and str(child) in seen.stdout, seen.stdout
        down = run_script("down.sh", env, timeout_s=120)
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"its leader (pid {leader}) is gone but its process group lives on" in down.stdout, down.stdout
        assert not alive(child) and process.group_members(leader) == []
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_policy_restarts_what_was_up_and_gives_up_on_a_loop_in_one_line() -> None:
    assert next_step("on-failure", 3, was_up=True, failures=1) is None
    assert next_step("on-failure", 3, was_up=True, failures=4).startswith("gave up: 3 restart(s) in a row")
    assert next_step("no", 3, was_up=True, failures=1) == "not restarted (RESTART=no)"
    assert "never answered /health" in next_step("on-failure", 3, was_up=False, failures=1)
    log = (
        "(APIServer pid=7) INFO 12-02 00:45:11 [launcher.py:1] Started\n"
        "(APIServer pid=7) WARNING 12-02 00:45:11 [utils.py:1] This can cause `OSError: [Errno 24] Too many`\n"
        "(EngineCore pid=8) ERROR 12-02 00:45:11 [core.py:1] RuntimeError: out of blocks\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
    )
    assert root_cause(log) == [
        "RuntimeError: out of blocks",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]


@pytest.mark.server
@pytest.mark.slow
def test_a_killed_api_server_leaves_no_engine_is_restarted_and_a_crash_loop_stops_with_one_line() -> None:
    port = free_port()
    env = kit_env(
        VLLM_PORT=str(port), RUNTIME="native", ENFORCE_EAGER="true", VLLM_CPU_KVCACHE_SPACE="1", RESTART_ATTEMPTS="1"
    )
    pidfile = process.PidFile(RUN_DIR / f"vllm-{port}.pid", API_SERVER_MODULE)
    record_path = RUN_DIR / f"vllm-{port}.events.json"
    _, orphan = plant_orphan(port)
    seen: list[int] = [orphan]
    group: int | None = None
    try:
        server = bring_up(port, env, "up.sh over an orphaned group")
        assert (
            "still runs (a half-started server, or what a crashed one left behind): stopping it first"
            in server.up_output
        ), server.up_output
        assert not alive(orphan)
        group, api_server, engine = server_processes(pidfile, record_path)
        record = Record.load(record_path)  # the first start's events, until the supervisor records more
        assert record is not None
        assert any("EngineCore" in process.cmdline(pid) for pid in engine), [process.cmdline(p) for p in engine]
        seen += [api_server, *engine]

        # the supervisor marks a server up at its own /health poll (once a second), which can come after up.sh's
        wait_until(
            lambda: (Record.load(record_path) or record).last("healthy") is not None,
            30,
            "the supervisor to see the server healthy",
        )
        os.kill(api_server, signal.SIGKILL)  # what the OOM killer does
        # the engine plugin's PR_SET_PDEATHSIG: gone at once, not after the supervisor's 10 s grace
        wait_until(lambda: not any(alive(pid) for pid in engine), 5, "the engine core to die with its API server")
        wait_until(lambda: back_up(record_path, api_server), 600, "the supervisor to bring the server back")
        restarted = status(env)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert "restarted 1 time(s)" in restarted.stdout and f"pid {api_server} killed by SIGKILL" in restarted.stdout
        (row,) = [  # other engines of this checkout (the suite's shared ones) have rows of their own
            line for line in restarted.stdout.splitlines() if line.startswith("vLLM ") and f" {port} " in line
        ]
        assert row.endswith("ago, killed by SIGKILL"), restarted.stdout  # its line's LAST CRASH

        second = Record.load(record_path).server_pid
        seen += [pid for pid in process.group_members(group) if pid != group]
        with socket.socket() as squatter:  # another program takes the port while it is down: every try fails
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            os.kill(second, signal.SIGKILL)
            wait_until(lambda: bind(squatter, port), 10, "the killed server's port to be free")
            squatter.listen()
            wait_until(lambda: pidfile.live_group() is None, 300, "the supervisor to give up")
            crashed = status(env)
        assert crashed.returncode == 3, crashed.stdout + crashed.stderr
        lines = crashed.stdout.splitlines()
        assert lines[0] == "Nothing runs of ENGINES=vllm.", crashed.stdout
        crash = next((line for line in lines if line.startswith("vLLM crashed: last crash")), "")
        assert "exited with code" in crash, crashed.stdout
        assert "gave up: 1 restart(s) in a row never reached /health (RESTART_ATTEMPTS=1)" in crash, crashed.stdout
        assert "Address already in use" in crashed.stdout, crashed.stdout  # the log's root cause
    finally:
        down = run_script("down.sh", env, timeout_s=120)
    assert_left_nothing(down, seen, group, port)


def bind(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def back_up(record_path, killed: int) -> bool:
    """The supervisor itself has seen a new server answer /health (it polls once a second)."""
    record = Record.load(record_path)
    healthy = record.last("healthy") if record else None
    return healthy is not None and healthy.pid not in (None, killed)


def test_a_stepped_wall_clock_does_not_make_a_live_server_look_like_a_reused_pid(tmp_path) -> None:
    """psutil's create_time moves with the wall clock (boot time + ticks); the record compares the ticks."""
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", API_SERVER_MODULE], start_new_session=True
    )
    try:
        pidfile = process.PidFile(tmp_path / "vllm.pid", API_SERVER_MODULE)
        pidfile.write(sleeper.pid)
        pid, epoch, ticks, boot = pidfile.path.read_text().split()
        pidfile.path.write_text(f"{pid} {float(epoch) - 3600} {ticks} {boot}\n")  # the clock stepped an hour
        assert pidfile.live_pid() == sleeper.pid and pidfile.live_group() == sleeper.pid
        pidfile.path.write_text(f"{pid} {epoch} {int(ticks) - 100} {boot}\n")  # another process, same pid
        assert pidfile.live_pid() is None and pidfile.live_group() is None
        pidfile.path.write_text(f"{pid} {epoch} {ticks} another-boot\n")
        assert pidfile.live_pid() is None
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.server
@pytest.mark.slow
def test_the_uni_executor_runs_two_processes_that_die_together_and_down_leaves_nothing() -> None:
    """VLLM_ENABLE_V1_MULTIPROCESSING=false (auto on an AVX2 CPU): the model in the engine core, no worker. The
    engine plugin still ends the engine core with its API server, and down.sh leaves nothing behind."""
    port = free_port()
    env = kit_env(
        VLLM_PORT=str(port),
        RUNTIME="native",
        ENFORCE_EAGER="true",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="false",
        RESTART_ATTEMPTS="0",
    )
    pidfile = process.PidFile(RUN_DIR / f"vllm-{port}.pid", API_SERVER_MODULE)
    record_path = RUN_DIR / f"vllm-{port}.events.json"
    seen: list[int] = []
    group: int | None = None
    try:
        server = bring_up(port, env, "up.sh with the uni executor")
        assert "processes" in server.up_output and "the model in the engine core" in server.up_output, server.up_output
        group, api_server, engine = server_processes(pidfile, record_path)
        titles = [process.cmdline(pid) for pid in engine]
        assert any("EngineCore" in title for title in titles), titles
        assert not any("Worker" in title for title in titles), titles  # one process fewer
        seen += [api_server, *engine]
        os.kill(api_server, signal.SIGKILL)
        wait_until(lambda: not any(alive(pid) for pid in engine), 5, "the engine core to die with its API server")
    finally:
        down = run_script("down.sh", env, timeout_s=120)
    assert_left_nothing(down, seen, group, port)
