"""Background servers: start in their own session, remember by pidfile, stop the whole process group."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

STOP_GRACE_S = 30.0
PORT_FREE_TIMEOUT_S = 30.0
POLL_S = 0.2


def port_is_free(host: str, port: int) -> bool:
    """True when a server could bind host:port now (what the engine is about to do)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if host == "localhost":
        host = "127.0.0.1"
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def next_free_port(host: str, start: int) -> int:
    return next(port for port in range(start + 1, 65536) if port_is_free(host, port))


LISTEN_PORTS_FROM = 20000  # where free_port's choice starts, below the kernel's range for outgoing connections
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def listen_ports() -> range:
    """Where free_port chooses: from LISTEN_PORTS_FROM up to the first port the kernel gives outgoing connections
    (ip_local_port_range; 32768 where it cannot be read); empty where that range starts lower."""
    try:
        outgoing_from = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        outgoing_from = 32768
    return range(LISTEN_PORTS_FROM, outgoing_from)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now (a test's or a benchmark's server, started next), chosen below the range the kernel
    takes outgoing connections' ports from: any process's connection can take a port in that range between this
    check and the server's bind (EADDRINUSE at a replica's start, seen here). Never the same port twice in a process;
    the OS's pick where no such range is left."""
    candidates = listen_ports()
    for port in random.sample(candidates, min(len(candidates), 200)):
        if port not in _handed_out and port_is_free(host, port):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_port_run(host: str, count: int, attempts: int = 50) -> int:
    """The first of `count` consecutive ports free on `host` now (a router, its replicas and its metrics):
    free_port picks a free start, the next `count - 1` are checked."""
    chosen_from = listen_ports()
    for _ in range(attempts):
        start = free_port(host)
        end = chosen_from.stop if start in chosen_from else 65536  # the run stays where its start was chosen
        if start + count <= end and all(port_is_free(host, start + i) for i in range(count)):
            return start
    raise OSError(f"no {count} consecutive free ports on {host} after {attempts} tries")


def wait_port_free(host: str, port: int, timeout_s: float = PORT_FREE_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not port_is_free(host, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid` (psutil: Linux and macOS alike)."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                members.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds the group's live processes have used so far, their reaped children (a compiler, say) included."""
    total = 0.0
    for member in group_members(pgid):
        try:
            times = psutil.Process(member).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


START_TIME_TOLERANCE_S = 0.05  # psutil's create_time is exact to the clock tick
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat, field 22): unlike psutil's create_time
    (those ticks plus the boot time, which moves whenever the wall clock is stepped: seen on this VM, and it
    made the kit think its own servers' pids were reused) it never changes. None where there is no /proc."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class PidFile:
    """Where a background server's pid is kept, with its start time: after a reboot or pid reuse another
    process may hold the pid (even one whose command line holds `marker`); the start time tells them apart.
    The line: `pid epoch-start [ticks-since-boot boot-id]`; the last two, where Linux gives them, are what
    is compared (a stepped wall clock moves the epoch start of every process)."""

    path: Path
    marker: str

    def write(self, pid: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        ticks = start_ticks(pid)
        exact = f" {ticks} {boot_id()}" if ticks is not None and boot_id() else ""
        self.path.write_text(f"{pid} {start_time(pid) or ''}{exact}\n")

    def fields(self) -> list[str]:
        try:
            return self.path.read_text().split()
        except OSError:
            return []

    def pid(self) -> int | None:
        try:
            return int(self.fields()[0])
        except (ValueError, IndexError):
            return None

    def recorded_start_time(self) -> float | None:
        try:
            return float(self.fields()[1])
        except (ValueError, IndexError):
            return None

    def recorded_ticks(self) -> int | None:
        """The recorded start in ticks since this boot; None for a record without one or from another boot."""
        fields = self.fields()
        if len(fields) < 4 or fields[3] != boot_id():
            return None
        try:
            return int(fields[2])
        except ValueError:
            return None

    def from_another_boot(self) -> bool:
        fields = self.fields()
        return len(fields) >= 4 and fields[3] != boot_id()

    def live_pid(self) -> int | None:
        """The recorded pid if that process still runs our server (same start time, marker in its command
        line), else None."""
        pid = self.pid()
        if pid is None or not group_members(pid) or self.marker not in cmdline(pid):
            return None
        if not self.started_at_record(pid):
            return None  # the pid was reused
        return pid

    def started_at_record(self, pid: int) -> bool:
        if self.from_another_boot():
            return False
        ticks = self.recorded_ticks()
        if ticks is not None:
            return start_ticks(pid) == ticks
        recorded, actual = self.recorded_start_time(), start_time(pid)
        return recorded is None or (actual is not None and abs(actual - recorded) <= START_TIME_TOLERANCE_S)

    def live_group(self) -> int | None:
        """The recorded process group while any process of it lives, its leader or not: a server whose leader
        died (SIGKILL, the OOM killer) can leave its engine behind, still in the group (`spawn` starts each
        server in a session of its own, and vLLM's processes never leave it). A live leader must be ours (see
        `live_pid`); with the leader gone, the pgid cannot have been reused while members hold it, and the
        members must have started no earlier than the recorded leader in this boot."""
        pgid = self.pid()
        if pgid is None:
            return None
        members = group_members(pgid)
        if not members:
            return None
        if pgid in members:
            return pgid if self.live_pid() == pgid else None
        ticks = self.recorded_ticks()
        if ticks is None:
            return None
        starts = [start_ticks(member) for member in members]
        if any(start is None or start < ticks for start in starts):
            return None
        return pgid

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


@contextmanager
def port_lock(run_dir: Path, ports: Sequence[int], wait_message: Callable[[str], None]) -> Iterator[None]:
    """One `up`/`down` at a time per port: `run_dir/port-PORT.lock`, taken in port order (no deadlock).
    A second caller waits for the first to finish, after saying who holds it."""
    with ExitStack() as locks:
        for number in sorted(set(ports)):
            locks.enter_context(
                file_lock(run_dir / f"port-{number}.lock", f"port {number} is being brought up or down", wait_message)
            )
        yield


@contextmanager
def file_lock(path: Path, what: str, wait_message: Callable[[str], None]) -> Iterator[None]:
    """An exclusive flock on `path` for the block, released however the block ends (or the process dies). A second
    caller waits, after `wait_message` says who holds it: "<what> by pid N (its command line); waiting ..."."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:  # closing releases the lock
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            wait_message(f"{what} by {holder}; waiting for it to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} ({cmdline(os.getpid()) or 'python -m serve'})")
        handle.flush()
        yield


def spawn(argv: Sequence[str], log_path: Path, env: dict[str, str], cwd: Path) -> int:
    """Start `argv` in a new session (so its pid is its process group), output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    return proc.pid


def stop_group(pgid: int, grace_s: float = STOP_GRACE_S) -> bool:
    """SIGTERM the group, SIGKILL whatever is left after `grace_s`. True if it had to kill."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return sig == signal.SIGKILL
        deadline = time.monotonic() + wait_s
        while group_members(pgid):
            if time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
        else:
            return sig == signal.SIGKILL
    return True
