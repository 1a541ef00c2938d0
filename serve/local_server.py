"""A server the kit runs as a local background process: pidfile, log, start with a health wait, stop.

Both native engines (vLLM and llama.cpp) are one of these; they differ only in what they run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from serve import process
from serve.health import SLOW_NOT_HUNG, is_healthy, wait_healthy
from serve.progress import StepFailed, console
from serve.settings import ROOT, STATE_DIR, SettingsError

LOG_DIR = STATE_DIR / "logs"
RUN_DIR = STATE_DIR / "run"


def ensure_port_free(host: str, port: int, port_setting: str, hint: str = "") -> None:
    """SettingsError (one line, with the fix) unless a server could bind host:port now."""
    try:
        free_now = process.port_is_free(host, port)
    except OSError as exc:  # not an address of this machine, or a name that does not resolve
        raise SettingsError(f"VLLM_HOST={host} is invalid: this machine cannot listen there ({exc.strerror or exc}); "
                            "use 127.0.0.1, 0.0.0.0 or one of this machine's own addresses") from None
    if not free_now:
        free = process.next_free_port(host, port)
        raise SettingsError(f"{port_setting}={port} is invalid: port {port} on {host} is already in use{hint}; "
                            f"stop what listens there or set {port_setting}={free} (free now)")


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

    @property
    def pidfile(self) -> process.PidFile:
        return process.PidFile(RUN_DIR / f"{self.name}-{self.port}.pid", self.marker)

    @property
    def log_path(self) -> Path:
        return LOG_DIR / f"{self.name}-{self.port}.log"

    def running_pid(self) -> int | None:
        """The live server's pid; a pidfile left by a dead one is removed."""
        pid = self.pidfile.live_pid()
        if pid is None and self.pidfile.path.exists():
            console.print(f"Removing the stale pidfile {self.pidfile.path.relative_to(ROOT)}")
            self.pidfile.remove()
        return pid

    def healthy(self) -> bool:
        return is_healthy(self.base_url, path=self.health_path)

    def ensure_port_free(self, hint: str = "") -> None:
        ensure_port_free(self.host, self.port, self.port_setting, hint)

    def launch(self, argv: Sequence[str], env: dict[str, str], timeout_s: float,
               patience: str = SLOW_NOT_HUNG) -> tuple[int, float]:
        """Spawn, record the pid, wait until healthy: (pid, seconds). On failure it is stopped, the log shown."""
        if self.log_path.exists():
            self.log_path.replace(self.log_path.with_suffix(".log.1"))
        pid = process.spawn(argv, self.log_path, env, cwd=ROOT)
        self.pidfile.write(pid)
        try:
            waited = wait_healthy(self.base_url, lambda: bool(process.group_members(pid)), self.log_path,
                                  timeout_s, f"Starting {self.label} (pid {pid}, log "
                                  f"{self.log_path.relative_to(ROOT)})", path=self.health_path, patience=patience)
        except (StepFailed, KeyboardInterrupt):
            self.stop(quiet=True)
            raise
        return pid, waited

    def stop(self, quiet: bool = False) -> bool:
        """Stop the whole process group and wait until the port is free. False if none was running."""
        pid = self.running_pid()
        if pid is None:
            return False
        started = time.monotonic()
        killed = process.stop_group(pid)
        self.pidfile.remove()
        if not process.wait_port_free(self.host, self.port):
            raise StepFailed(f"stopped pid {pid}, but port {self.port} is still in use by another process")
        if not quiet:
            how = "killed after the grace period" if killed else "stopped"
            console.print(f"[green]✓[/green] {self.label} (pid {pid}) {how} in {time.monotonic() - started:.1f} s; "
                          f"port {self.port} is free")
        return True


class LocalRuntime:
    """A runtime whose engine is one LocalServer: the lifecycle calls are the server's own."""

    server: LocalServer
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
