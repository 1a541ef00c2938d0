"""The kit's own supervisor: `python -m serve.processes.supervisor ... -- ARGV` runs one server, applying RESTART.

`spawn` starts the supervisor as the leader of a session of its own and records its pid; the server runs as
its child in the same process group, so `stop_group` (down.sh) stops both at once, and the supervisor, told
SIGTERM, restarts nothing: down.sh is never fought.

Policy, where it is decided (`next_step`):
- A server that never answered /health since `up` is not restarted: `up` is watching it and reports the
  failure with the log (a bad flag is a mistake to fix, not a crash to retry).
- RESTART=on-failure restarts one that was up and then exited without being asked to, whatever its exit
  status: vLLM's API server exits 0 when its engine core dies (seen with SIGKILL of the engine core).
  RESTART=no restarts none. Before each try, what is left of the dead one's group (an engine core, its
  workers) is waited for and then killed, so the new one never starts beside the old one's memory.
- A server whose model is bound to CPUs of its own (VLLM_CPU_OMP_THREADS_BIND naming them: a replica's share)
  restarts on those CPUs only, and may use every CPU again once it answers /health (but for the process running
  the model, whose threads vLLM bound). While starting, each process that imports torch has MKL count the cores by
  moving itself onto each CPU in turn; a CPU the other replica's model keeps busy held that move for minutes (a
  replica killed under load came back 236 s later, where a start takes 30 s; `strace -k` named
  MKL_Read_ThreadENV_Count_Cores). The first start keeps every CPU: `up` starts replicas one after another, the
  others idle, and imports on two CPUs start sooner (26 s where one took 39 s).
- Back-off doubles from BACKOFF_FIRST_S to BACKOFF_MAX_S. A try that reaches /health resets the count; after
  RESTART_ATTEMPTS tries in a row that do not, it gives up with one line saying why (a crash loop).

A server started to take over from another one on its port (`--take-over PIDFILE`: the eager engine that answers
while this one compiles, serve/engines/hand_over.py) is healthy only once its own process listens there: until then
the other one answers /health. Then the other one's group is stopped, once the connections it holds are done.

Each event (started, healthy, took-over, crashed, restarting, gave up, stopped) goes to
`.kit/run/NAME-PORT.events.json`, which `status` reads to tell a crash from a stop. It imports only the standard
library and psutil.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from serve.config.settings import RESTART_POLICIES
from serve.processes.process import PidFile, cmdline, group_members, stop_group
from ui.cli import KitArgumentParser, non_negative_int

SUPERVISOR_MODULE = "serve.processes.supervisor"
BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 60.0
HEALTH_POLL_S = 1.0
HEALTH_TIMEOUT_S = 2.0
LEFTOVER_GRACE_S = 10.0  # what is left of a dead server's group gets this long to exit by itself, then SIGKILL
KEPT_EVENTS = 40
WRITING = threading.Lock()
DRAIN_POLL_S = 0.5
DRAIN_MAX_S = 600.0  # the longest the engine handed over from may take to finish what it holds, then it is stopped
ROOT_CAUSE_LINES = 4
# '(EngineCore pid=1) ERROR 12-02 00:41:09 [core.py:133] ' before what vLLM says
VLLM_LOG_PREFIX = re.compile(r"^(\(\w+ pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ \[[^]]*\] ")
ERROR_LINE = re.compile(
    r"^[\w.]*(Error|Exception)\b(: |$)|\b(Killed|Segmentation fault|core dumped|died unexpectedly)\b"
)


@dataclass(slots=True)
class Event:
    at: float  # time.time()
    kind: str  # started | healthy | took-over | crashed | restarting | gave-up | stopped
    pid: int | None = None
    exit_code: int | None = None  # the server's own exit status
    signal_name: str | None = None  # or the signal that ended it
    cause: list[str] = field(default_factory=list)  # the log's last error lines for this run
    note: str = ""  # what the policy did, in words

    @property
    def how(self) -> str:
        return f"killed by {self.signal_name}" if self.signal_name else f"exited with code {self.exit_code}"


@dataclass(slots=True)
class Record:
    """What happened to one server: its supervisor's pid, its policy and its recent events (oldest first)."""

    label: str
    policy: str
    attempts: int
    supervisor_pid: int
    events: list[Event] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Record | None:
        try:
            raw = json.loads(path.read_text())
            return cls(
                raw["label"],
                raw["policy"],
                raw["attempts"],
                raw["supervisor_pid"],
                [Event(**event) for event in raw["events"]],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def add(self, path: Path, event: Event) -> None:
        with WRITING:  # the hand-over's thread adds one too
            self.events = [*self.events, event][-KEPT_EVENTS:]
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(asdict(self), indent=1))
            temporary.replace(path)  # status never reads half a record

    def last(self, *kinds: str) -> Event | None:
        return next((event for event in reversed(self.events) if event.kind in kinds), None)

    @property
    def restarts(self) -> int:
        return sum(event.kind == "restarting" for event in self.events)

    @property
    def server_pid(self) -> int | None:
        started = self.last("started")
        return started.pid if started else None


def root_cause(log_text: str) -> list[str]:
    """The last error lines a run wrote (vLLM's `[file.py:N] ` prefixes dropped), else its last lines."""
    lines = [VLLM_LOG_PREFIX.sub("", line).strip() for line in log_text.splitlines() if line.strip()]
    errors = list(dict.fromkeys(line for line in lines if ERROR_LINE.search(line)))
    return (errors or lines)[-ROOT_CAUSE_LINES:]


def next_step(policy: str, attempts: int, was_up: bool, failures: int) -> str | None:
    """None to restart; else why not (one line). `failures`: tries in a row, this one included, not healthy."""
    if not was_up:
        return "not restarted: it never answered /health since up.sh started it (up.sh reports why)"
    if policy == "no":
        return "not restarted (RESTART=no)"
    if failures > attempts:
        return (
            f"gave up: {attempts} restart(s) in a row never reached /health (RESTART_ATTEMPTS={attempts}); "
            "fix the cause in the log, then run up.sh"
        )
    return None


def backoff_s(failures: int) -> float:
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (failures - 1))


def own_cpus(mask: str) -> set[int] | None:
    """The CPUs a VLLM_CPU_OMP_THREADS_BIND value names for one worker ("0", "2-3", "0,2-3") among those this process
    may use; None for vLLM's words (auto, nobind, all), several workers ("0|1"), or when it names them all."""
    allowed = os.sched_getaffinity(0)
    try:
        cpus: set[int] = set()
        for part in mask.split(","):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        return None
    cpus &= allowed
    return cpus if cpus and cpus != allowed else None


def release(pgid: int, everywhere: set[int]) -> None:
    """Let every process of the group use `everywhere` again, each of its threads, but the one running the model:
    vLLM's worker where there is one, else the engine core (vLLM's uni executor runs the model there)."""
    members = {pid: cmdline(pid) for pid in group_members(pgid) if pid != os.getpid()}
    runner = "VLLM::Worker" if any("VLLM::Worker" in line for line in members.values()) else "VLLM::EngineCore"
    for pid, line in members.items():
        if runner in line:
            continue
        with contextlib.suppress(OSError):
            for thread in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(thread), everywhere)


def healthy(url: str) -> bool:
    """200 from the health path; a 401/403 counts too (a probe that wants the key answers, so it is up)."""
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as answer:
            return answer.status == 200
    except urllib.error.HTTPError as refused:
        return refused.code in (401, 403)
    except (OSError, ValueError):
        return False


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself listens on TCP `port` (and not only another process sharing the port)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections)


def held_connections(pgid: int, port: int) -> int:
    """Connections to `port` that the processes of group `pgid` still hold (a request in flight, or kept alive)."""
    held = 0
    for pid in group_members(pgid):
        with contextlib.suppress(psutil.Error):
            held += sum(
                c.status == psutil.CONN_ESTABLISHED and bool(c.laddr) and c.laddr.port == port
                for c in psutil.Process(pid).net_connections(kind="tcp")
            )
    return held


class Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.record_path = Path(args.record)
        self.log_path = Path(args.log)
        self.record = Record(args.label, args.restart, args.attempts, os.getpid())
        self.stopping = threading.Event()
        self.taking_over = Path(args.take_over) if args.take_over else None  # until this server listens itself
        self.port = urllib.parse.urlsplit(args.health_url).port or 80
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def stop(self, signum: int, _frame: object) -> None:
        self.stopping.set()

    def say(self, line: str) -> None:
        """One line in the server's log, where an operator looks first."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        with self.log_path.open("a") as log:
            log.write(f"kit supervisor {stamp}: {self.args.label} {line}\n")

    def run_once(self, restart: bool) -> tuple[int, bool, list[str]]:
        """Start the server, wait for it to exit; (exit status as Popen gives it, whether it was healthy, cause).
        A `restart` of a replica starts on its own CPUs (the other replica may be busy: see the module's doc)."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            child = subprocess.Popen(self.args.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        everywhere = os.sched_getaffinity(0)
        start_on = own_cpus(os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")) if restart else None
        if start_on:  # before it imports anything: what it starts inherits this
            with contextlib.suppress(OSError):
                os.sched_setaffinity(child.pid, start_on)
        self.record.add(self.record_path, Event(time.time(), "started", child.pid))
        if self.stopping.is_set():
            child.terminate()
        was_healthy = False
        while child.poll() is None:
            if not was_healthy and self.serving(child.pid):
                was_healthy = True
                if start_on:
                    release(os.getpgrp(), everywhere)
                self.record.add(self.record_path, Event(time.time(), "healthy", child.pid))
                if self.args.mark:
                    Path(self.args.mark).parent.mkdir(parents=True, exist_ok=True)
                    Path(self.args.mark).touch()
                if self.taking_over is not None:
                    threading.Thread(target=self.hand_over, args=(self.taking_over,), daemon=True).start()
                    self.taking_over = None
            self.stopping.wait(HEALTH_POLL_S)
            if self.stopping.is_set() and child.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=HEALTH_POLL_S)
        with self.log_path.open(errors="replace") as log:
            log.seek(offset)
            cause = root_cause(log.read()[-200_000:])
        return child.returncode, was_healthy, cause

    def serving(self, pid: int) -> bool:
        """Healthy: /health answers; and while it takes over the port, its own process listens there (until then
        the server it takes over from answers /health)."""
        if self.taking_over is not None and not listens(pid, self.port):
            return False
        return healthy(self.args.health_url)

    def hand_over(self, pidfile: Path) -> None:
        """Every new connection comes here now (serve/engine_plugins/kit_shared_port.py): the server handed over from
        is told to end each connection with its next answer, given until it holds none, then stopped."""
        began = time.monotonic()
        pgid = PidFile(pidfile, SUPERVISOR_MODULE).live_group()  # the handed-over server's group, led by its supervisor
        if pgid is None:
            self.say("took over the port; the server it took over from had stopped already")
            return
        for pid in group_members(pgid):  # its API server (its supervisor's command line names it too)
            if "kit_shared_port" in cmdline(pid) and SUPERVISOR_MODULE not in cmdline(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGUSR1)
        deadline = began + DRAIN_MAX_S
        while held_connections(pgid, self.port) and time.monotonic() < deadline and not self.stopping.is_set():
            time.sleep(DRAIN_POLL_S)
        left = held_connections(pgid, self.port)
        stop_group(pgid)
        pidfile.unlink(missing_ok=True)
        pidfile.with_suffix(".events.json").unlink(missing_ok=True)  # its supervisor's: nothing of it runs now
        drained = f"{left} connection(s) still open after {DRAIN_MAX_S:.0f} s, cut" if left else "no request cut"
        note = f"took over port {self.port} from pid {pgid}, stopped {time.monotonic() - began:.1f} s later ({drained})"
        self.record.add(self.record_path, Event(time.time(), "took-over", self.record.server_pid, note=note))
        self.say(note)

    def clear_leftovers(self) -> None:
        """Wait for the rest of the group (the dead server's engine) to exit; SIGKILL what outlives the grace."""
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        while left := [pid for pid in group_members(os.getpgrp()) if pid != os.getpid()]:
            if time.monotonic() > deadline:
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                self.say(f"killed {len(left)} leftover process(es) of the dead server: {left}")
                deadline = time.monotonic() + LEFTOVER_GRACE_S
            time.sleep(0.2)

    def run(self) -> int:
        was_up, failures = False, 0
        while True:
            status, was_healthy, cause = self.run_once(restart=self.record.restarts > 0)
            name = signal.Signals(-status).name if status < 0 else None
            event = Event(time.time(), "crashed", self.record.server_pid, None if name else status, name, cause)
            if self.stopping.is_set():
                event.kind, event.note = "stopped", "stopped by down.sh (SIGTERM to its group)"
                self.record.add(self.record_path, event)
                return 0
            was_up = was_up or was_healthy
            failures = 0 if was_healthy else failures
            failures += 1
            self.clear_leftovers()
            why_not = next_step(self.args.restart, self.args.attempts, was_up, failures)
            if why_not is not None:
                event.kind = "gave-up" if why_not.startswith("gave up") else "crashed"
                event.note = why_not
                self.record.add(self.record_path, event)
                self.say(f"{event.how}; {why_not}")
                return 1
            delay = backoff_s(failures)
            event.note = f"restart {failures} of {self.args.attempts} in {delay:.0f} s (RESTART={self.args.restart})"
            self.record.add(self.record_path, event)
            self.record.add(self.record_path, Event(time.time(), "restarting", note=event.note))
            self.say(f"{event.how}; {event.note}")
            if self.stopping.wait(delay):
                self.record.add(
                    self.record_path, Event(time.time(), "stopped", note="stopped by down.sh while waiting to restart")
                )
                return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = KitArgumentParser(prog="python -m serve.processes.supervisor", description=__doc__)
    parser.add_argument("--label", required=True)
    parser.add_argument("--health-url", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--restart", choices=RESTART_POLICIES, default="on-failure")
    parser.add_argument("--attempts", type=non_negative_int, default=3)
    parser.add_argument("--take-over", help="the pidfile of the server on the same port this one replaces once up")
    parser.add_argument("--mark", help="a file touched once the server is healthy")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    args.argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not args.argv:
        parser.error("give the server's command after --")
    return args


if __name__ == "__main__":
    sys.exit(Supervisor(parse(sys.argv[1:])).run())
