"""A server the kit runs as a local background process: pidfile, log, start with a health wait, stop.

Both native engines (vLLM and llama.cpp) are one of these; they differ only in what they run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from serve.config.paths import ROOT, RUN_DIR, STATE_DIR
from serve.config.settings import Settings
from serve.processes import process, run_record, supervisor
from serve.processes.health import SLOW_NOT_HUNG, is_healthy, wait_healthy
from ui.progress import StepFailed, console, tail
from ui.values import SettingsError

LOG_DIR = STATE_DIR / "logs"
FAILED_START_GRACE_S = 3.0  # a start that failed has no request to finish: its group gets SIGKILL soon after SIGTERM


def ensure_port_free(host: str, port: int, port_setting: str, hint: str = "") -> None:
    """SettingsError (one line, with the fix) unless a server could bind host:port now."""
    try:
        free_now = process.port_is_free(host, port)
    except OSError as exc:  # not an address of this machine, or a name that does not resolve
        raise SettingsError(
            f"VLLM_HOST={host} is invalid: this machine cannot listen there ({exc.strerror or exc}); "
            "use 127.0.0.1, 0.0.0.0 or one of this machine's own addresses"
        ) from None
    if not free_now:
        free = process.next_free_port(host, port)
        raise SettingsError(
            f"{port_setting}={port} is invalid: port {port} on {host} is already in use{hint}; "
            f"stop what listens there or set {port_setting}={free} (free now)"
        )


@dataclass(frozen=True, slots=True)
class LocalServer:
    """One background server per port: `.kit/run/NAME-PORT.pid` and `.kit/logs/NAME-PORT.log`."""

    label: str  # what users call it: "vLLM", "llama.cpp"
    name: str  # file prefix: "vllm", "llamacpp"
    marker: str  # part of its command line (guards against a reused pid)
    host: str
    port: int
    port_setting: str  # the variable that moves it: "VLLM_PORT", "LLAMACPP_PORT"
    base_url: str
    health_path: str = "/health"
    restart: str = "on-failure"  # RESTART, applied by serve/processes/supervisor.py
    restart_attempts: int = 3  # RESTART_ATTEMPTS

    @classmethod
    def of(
        cls,
        settings: Settings,
        label: str,
        name: str,
        marker: str,
        port: int,
        port_setting: str,
        health_path: str = "/health",
    ) -> LocalServer:
        """The server on `port` of VLLM_HOST, restarted as RESTART and RESTART_ATTEMPTS say."""
        return cls(
            label,
            name,
            marker,
            settings.host,
            port,
            port_setting,
            settings.url_for(port),
            health_path=health_path,
            restart=settings.restart,
            restart_attempts=settings.restart_attempts,
        )

    @property
    def pidfile(self) -> process.PidFile:
        return process.PidFile(RUN_DIR / f"{self.name}-{self.port}.pid", self.marker)

    @property
    def log_path(self) -> Path:
        return LOG_DIR / f"{self.name}-{self.port}.log"

    @property
    def record_path(self) -> Path:
        """What its supervisor saw happen to it (serve/processes/supervisor.py): `status` reads it."""
        return RUN_DIR / f"{self.name}-{self.port}.events.json"

    def running_pid(self) -> int | None:
        """The recorded process group while any process of it lives (its supervisor, the server, or what a
        dead server left behind); None otherwise."""
        return self.pidfile.live_group()

    def record(self) -> supervisor.Record | None:
        return supervisor.Record.load(self.record_path)

    def healthy(self) -> bool:
        return is_healthy(self.base_url, path=self.health_path)

    def ensure_port_free(self, hint: str = "") -> None:
        ensure_port_free(self.host, self.port, self.port_setting, hint)

    def launch(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        timeout_s: float,
        patience: str = SLOW_NOT_HUNG,
        progress: Callable[[str], str] | None = None,
        *,
        wait: bool = True,
        take_over: Path | None = None,
        mark: Path | None = None,
    ) -> tuple[int, float]:
        """Spawn, record the pid, wait until healthy: (pid, seconds). On failure it is stopped, the log shown.
        `progress` turns the log so far into the wait's progress line (default: the log's last line).
        `wait=False` returns once it is spawned (its supervisor watches it); `take_over`, the pidfile of the server on
        the same port it replaces once it listens (serve/engines/hand_over.py); `mark`, a file touched once healthy."""
        if self.log_path.exists():
            self.log_path.replace(self.log_path.with_suffix(".log.1"))
        self.record_path.unlink(missing_ok=True)
        watched = [
            sys.executable,
            "-m",
            "serve.processes.supervisor",
            "--label",
            self.label,
            "--health-url",
            f"{self.base_url}{self.health_path}",
            "--log",
            str(self.log_path),
            "--record",
            str(self.record_path),
            "--restart",
            self.restart,
            "--attempts",
            str(self.restart_attempts),
            *(["--take-over", str(take_over)] if take_over else []),
            *(["--mark", str(mark)] if mark else []),
            "--",
            *argv,
        ]
        pid = process.spawn(watched, self.log_path, env, cwd=ROOT)  # `-m` from ROOT finds `serve`
        self.pidfile.write(pid)
        if not wait:
            return pid, 0.0
        try:
            waited = wait_healthy(
                self.base_url,
                lambda: bool(process.group_members(pid)),
                self.log_path,
                timeout_s,
                f"Starting {self.label} (pid {pid}, log {self.log_path.relative_to(ROOT)})",
                path=self.health_path,
                patience=patience,
                progress=progress,
            )
        except (StepFailed, KeyboardInterrupt):
            # nothing in flight to finish: vLLM's API server, its engine dead, ignores SIGTERM for the whole grace
            self.stop(quiet=True, grace_s=FAILED_START_GRACE_S)
            raise
        return pid, waited

    def stop(self, quiet: bool = False, grace_s: float = process.STOP_GRACE_S, wait_port: bool = True) -> bool:
        """Stop the whole process group (SIGTERM, SIGKILL after `grace_s`) and wait until the port is free (unless
        `wait_port` is False: another server of ours still listens there). False if none was running."""
        pid = self.running_pid()
        if pid is None:
            if self.pidfile.path.exists():
                console.print(f"Removing the stale pidfile {self.pidfile.path.relative_to(ROOT)}")
                self.pidfile.remove()
            return False
        leader_gone = self.pidfile.live_pid() is None
        started = time.monotonic()
        if leader_gone:
            left = ", ".join(f"{member} {process.cmdline(member)[:40] or '?'}" for member in process.group_members(pid))
            console.print(
                f"{self.label} on port {self.port}: its leader (pid {pid}) is gone but its process "
                f"group lives on ({left}); stopping the group"
            )
        killed = process.stop_group(pid, grace_s)
        self.pidfile.remove()
        run_record.remove(self.port)  # what it ran with runs no more
        if wait_port and not process.wait_port_free(self.host, self.port):
            raise StepFailed(f"stopped pid {pid}, but port {self.port} is still in use by another process")
        if not quiet:
            how = "killed after the grace period" if killed else "stopped"
            free = f"port {self.port} is free" if wait_port else f"the other server on port {self.port} is next"
            seconds = time.monotonic() - started
            console.print(f"[green]✓[/green] {self.label} (pid {pid}) {how} in {seconds:.1f} s; {free}")
        return True


class LocalRuntime:
    """A runtime whose engine is one LocalServer: the lifecycle calls are the server's own."""

    server: LocalServer
    label: str  # what users call it: "vLLM", "llama.cpp"
    picked_because = ""

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def log_path(self) -> Path:
        return self.server.log_path

    @property
    def pidfile(self) -> process.PidFile:
        return self.server.pidfile

    def running_pid(self) -> int | None:
        return self.server.running_pid()

    def healthy(self) -> bool:
        return self.server.healthy()

    def stop(self, quiet: bool = False) -> bool:
        return self.server.stop(quiet)


def when(at: float) -> str:
    return f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(at))} ({time.time() - at:.0f} s ago)"


def condition(server: LocalServer) -> tuple[int, list[str]]:
    """What `status` says of a local server: (code: 0 healthy, 1 unhealthy or restarting, 3 down), lines.
    It tells a stop (down.sh) from a crash (when, how, the log's root cause, what RESTART did about it)."""
    pid, record = server.running_pid(), server.record()
    crash = record.last("crashed", "gave-up") if record else None
    crash_line = f"last crash {when(crash.at)}: pid {crash.pid} {crash.how}; {crash.note}" if crash else ""
    causes = [f"  {line}" for line in crash.cause] if crash and crash.cause else []
    log = f"log: {server.log_path}"
    if pid is not None and server.pidfile.live_pid() is None:
        left = ", ".join(f"{member} ({process.cmdline(member)[:40] or '?'})" for member in process.group_members(pid))
        return 1, [
            f"{server.label} orphaned: its supervisor and server (pid {pid}) are gone, their process group "
            f"lives on: {left}; bash down.sh stops it",
            log,
        ]
    if pid is not None:
        healthy = server.healthy()
        restarts = f"; restarted {record.restarts} time(s), {crash_line}" if record and record.restarts else ""
        if not healthy and record and record.events and record.events[-1].kind == "restarting":
            return 1, [f"{server.label} restarting: {crash_line}", *causes, log]
        state = "healthy" if healthy else "starting or unhealthy"
        who = f"pid {record.server_pid} (supervisor {pid})" if record and record.server_pid else f"pid {pid}"
        return (0 if healthy else 1), [f"{server.label} up: {who}, {state}, {server.base_url}/v1{restarts}"]
    last = record.events[-1] if record and record.events else None
    if last is not None and last.kind == "stopped":
        return 3, [f"{server.label} down: stopped {when(last.at)} ({last.note})"]
    if crash is not None and last is crash:
        return 3, [f"{server.label} crashed: {crash_line}", "  root cause, as logged:" if causes else "", *causes, log]
    if server.pidfile.path.exists():
        return 3, [
            f"{server.label} died: its whole process group is gone, supervisor included (a kill of the "
            f"group, or a reboot), and no exit was recorded; the log's last lines:",
            *(f"  {line}" for line in supervisor.root_cause(tail(server.log_path, 40))),
            log,
        ]
    return 3, [f"{server.label} down: no {server.label} started by this kit on port {server.port}"]
