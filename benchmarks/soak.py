"""A soak with faults: REPLICAS=2 behind vllm-router under load above capacity, clients hanging up mid-stream,
one replica's API server and then the other replica's engine core SIGKILLed; the kit's supervisor
(RESTART=on-failure) brings each back and the router takes it in again. Then it counts and checks:

- every request either completed, was aborted by its own client (it hung up after a few chunks), or was in
  flight on a killed process (cut mid-stream, or queued there): nothing else, and the cut ones no more than
  that replica's own running + waiting gauges said just before the kill (+ what the router had just sent it);
- KV usage back to 0 and nothing running or waiting on either replica once the clients are done;
- no process of the kit (cwd = this checkout) outside the recorded process groups (no orphans);
- the resident memory of each group within RSS_BOUND of where it stood after warm-up.

Replica A's API server dies at --kill-after-s; replica B's engine core once A answers again and the router
routes to it again (its own gauges: A healthy, A's circuit closed). Two replicas out of the router's rotation at
once would be a different test: it then has nowhere to send, and answers 503. Load stops --settle-s after B is
back.

    nice -n 15 .venv/bin/python -m benchmarks.soak --users 48 --kill-after-s 30
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
import psutil

from benchmarks.replicas import measure, plain_messages
from client.stream import RequestRecord, chat_payload, closed_loop, stream_chat
from labs.results import Envelope, MeasuredEngine, command_line, write
from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.engines import runtimes
from serve.engines.native import NativeRuntime
from serve.engines.router import RouterRuntime, worker_gauges
from serve.engines.runtimes import running
from serve.processes import process, run_record
from serve.processes.local_server import LocalRuntime
from serve.processes.metrics import scrape
from ui.cli import KitArgumentParser, positive_int

DEFAULT_OUT = ROOT / "results" / "soak"
RSS_BOUND = 1.25  # a group's RSS at the end over the same group's after warm-up (a fresh replica included)
HANG_UP_SHARE = 0.2
RECOVERY_TIMEOUT_S = 600.0


@dataclass(slots=True)
class Tally:
    completed: int = 0
    hung_up: int = 0  # aborted by their own client
    cut: list[str] = field(default_factory=list)  # errors of requests that were in flight on a killed process
    other: list[str] = field(default_factory=list)
    in_flight_at_kill: list[float] = field(default_factory=list)  # the victim's running + waiting just before
    back_after_s: list[float] = field(default_factory=list)  # each victim healthy again, seconds after its kill


async def hang_up_after(http: httpx.AsyncClient, api_url: str, payload: dict, events: int, key: str | None) -> str:
    """Stream, then close the connection after `events` server-sent events (the server must abort the request).

    "hung up" when it did; "completed" when the answer ended first (a loaded server can send a whole short
    answer before the client reads a few events); "failed" when no answer or an error came instead.
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with http.stream("POST", f"{api_url}/chat/completions", json=payload, headers=headers) as response:
            if response.status_code != httpx.codes.OK:
                return "failed"
            seen = 0
            async for line in response.aiter_lines():  # lines, not byte chunks: one network read can hold many
                if line.strip() == "data: [DONE]":
                    return "completed"
                if line.startswith("data:"):
                    seen += 1
                    if seen >= events:
                        return "hung up"
    except httpx.HTTPError:
        return "failed"
    return "failed"  # the stream ended without [DONE]


ENGINE_DEAD = "EngineCore encountered an issue"  # vLLM's EngineDeadError, in the stream's error event
ENGINE_DEATH_NOTICED_S = 5.0  # the most a killed engine core's API server takes to see it and refuse requests


def dead_engine_took_it(record: RequestRecord, kills: list[float]) -> bool:
    """A request an API server accepted just after its engine core was killed, before it knew (then it answers
    500, which the router retries elsewhere): it gets a 200 and vLLM's EngineDeadError as the stream's error event.
    It reached a killed process, as the streams cut mid-answer did; the router cannot retry a 200."""
    return (
        record.status == 200
        and ENGINE_DEAD in (record.error or "")
        and any(0 <= record.sent_s - at <= ENGINE_DEATH_NOTICED_S for at in kills)
    )


async def turn(
    http: httpx.AsyncClient,
    number: int,
    settings: Settings,
    stop: asyncio.Event,
    tally: Tally,
    kills: list[float],
    rngs: dict[int, random.Random],
) -> bool:
    """One request of user `number` (its own random sequence in `rngs`), counted in `tally`; False once stopped."""
    if stop.is_set():
        return False
    rng = rngs.setdefault(number, random.Random(number))
    api_url, key = f"{settings.base_url}/v1", settings.api_key or None
    payload = chat_payload(
        settings.model_name, [{"role": "user", "content": f"Tell story {rng.random()}."}], 64, ignore_eos=True
    )
    if rng.random() < HANG_UP_SHARE:
        sent_s = time.perf_counter()
        outcome = await hang_up_after(http, api_url, payload, rng.randint(2, 8), key)
        if outcome == "hung up":
            tally.hung_up += 1
        elif outcome == "completed":
            tally.completed += 1
        elif any(sent_s <= at <= time.perf_counter() for at in kills):
            tally.cut.append("cut by a kill before its client could hang up")
        else:
            tally.other.append("a request meant to hang up failed before it could")
        return True
    record = await stream_chat(http, api_url, payload, RequestRecord(0, 64, time.perf_counter()), key)
    if record.ok:
        tally.completed += 1
    elif any(record.sent_s <= at <= (record.done_s or at) for at in kills):
        tally.cut.append(f"{record.status}: {record.error}"[:120])
    elif dead_engine_took_it(record, kills):
        tally.cut.append(f"{record.status}: {record.error} (sent as its engine core died)"[:160])
    else:
        tally.other.append(f"{record.status}: {record.error or record.text}"[:200])
    return True


def gauges(url: str) -> tuple[float, float, float]:
    snapshot = scrape(url)
    return snapshot.running, snapshot.waiting, snapshot.kv_usage or 0.0


def groups_rss_mib(servers: Sequence[LocalRuntime]) -> dict[str, float]:
    result = {}
    for runtime in servers:
        pgid = runtime.running_pid()
        members = process.group_members(pgid) if pgid else []
        result[runtime.label] = (
            sum(psutil.Process(pid).memory_info().rss for pid in members if psutil.pid_exists(pid)) / 2**20
        )
    return result


def checkout_processes() -> dict[int, float]:
    """Live processes run from this checkout (cwd ROOT), by pid, with their start times."""
    found = {}
    for proc in psutil.process_iter(["pid", "cwd", "status", "create_time"]):
        if proc.info["cwd"] == str(ROOT) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found[proc.pid] = proc.info["create_time"]
    return found


def kit_program(command_line: str) -> bool:
    """A program of the kit's: one of this checkout's (a venv's python, a supervisor, vLLM, the router, llama.cpp),
    or a vLLM process that renamed itself (VLLM::EngineCore, VLLM::Worker). A shell someone runs in the checkout
    while the soak runs is not one."""
    return str(ROOT) in command_line or command_line.startswith("VLLM::")


def strays(servers: Sequence[LocalRuntime], before: dict[int, float]) -> list[str]:
    """The kit's programs run from this checkout (cwd ROOT) since the soak began that are not in its servers'
    recorded groups, this benchmark aside. What ran before it (another server of this checkout, the test suite's
    dockerd, an install in the background) is not the soak's to judge, nor what it starts in its own group."""
    groups = {runtime.running_pid() for runtime in servers}
    mine = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    earlier = _groups(before) - _groups(mine)  # groups of their own: what this soak and its callers run is judged
    found = []
    for pid, started in checkout_processes().items():
        if pid in mine or before.get(pid) == started or not kit_program(command_line := process.cmdline(pid)):
            continue
        try:
            if os.getpgid(pid) not in groups | earlier:
                found.append(f"{pid} {command_line[:80]}")
        except ProcessLookupError:
            continue
    return found


def _groups(pids: Iterable[int]) -> set[int]:
    found = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            found.add(os.getpgid(pid))
    return found


def wait_until(done: Callable[[], bool], what: str, log: Path, poll_s: float) -> float:
    """Seconds until `done()`; after RECOVERY_TIMEOUT_S, exits saying `what` did not happen and where to look."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > RECOVERY_TIMEOUT_S:
            raise SystemExit(f"{what} in {RECOVERY_TIMEOUT_S:g} s: see {log}")
        time.sleep(poll_s)
    return time.monotonic() - started


def wait_healthy_again(runtime: LocalRuntime, old_pid: int | None) -> float:
    def back() -> bool:
        record = runtime.server.record()
        return record is not None and record.server_pid != old_pid and runtime.healthy()

    return wait_until(back, f"{runtime.label} did not come back", runtime.log_path, 1.0)


def in_rotation(router: RouterRuntime, replica: LocalRuntime) -> bool:
    """Whether the router would send `replica` a request now: healthy by its checks and its circuit closed."""
    gauges = worker_gauges(router.metrics_url, replica.base_url)
    return gauges.get("vllm_router_worker_health") == 1 and gauges.get("vllm_router_cb_state", 0) == 0


def wait_in_rotation(router: RouterRuntime, replica: LocalRuntime) -> float:
    return wait_until(
        lambda: in_rotation(router, replica),
        f"the router did not take {replica.label} back",
        router.log_path,
        0.5,
    )


def kill(runtime: LocalRuntime, what: str, tally: Tally, kills: list[float]) -> int | None:
    """SIGKILL the replica's API server or its engine core; the API server's pid (the one that will change)."""
    record = runtime.server.record()
    api_server = record.server_pid if record else None
    pgid = runtime.running_pid()
    assert api_server is not None and pgid is not None, f"{runtime.label} is not running"
    victim = (
        api_server
        if what == "api server"
        else next(pid for pid in process.group_members(pgid) if "EngineCore" in process.cmdline(pid))
    )
    running_now, waiting_now, _ = gauges(runtime.base_url)
    tally.in_flight_at_kill.append(running_now + waiting_now)
    kills.append(time.perf_counter())
    os.kill(victim, signal.SIGKILL)
    print(
        f"{time.strftime('%H:%M:%S')} SIGKILL {runtime.label}'s {what} (pid {victim}): {running_now:g} running, "
        f"{waiting_now:g} waiting there",
        flush=True,
    )
    return api_server


async def soak(
    settings: Settings,
    engines: Sequence[LocalRuntime],
    router: RouterRuntime,
    users: int,
    kill_after_s: float,
    settle_s: float,
) -> tuple[Tally, float]:
    tally, stop = Tally(), asyncio.Event()
    kills: list[float] = []  # when each SIGKILL was sent (perf_counter)
    started = time.monotonic()
    each_turn = partial(turn, settings=settings, stop=stop, tally=tally, kills=kills, rngs={})
    clients = asyncio.create_task(closed_loop(users, each_turn))
    await asyncio.sleep(kill_after_s)
    first, second = engines
    old = kill(first, "api server", tally, kills)
    back_s = await asyncio.to_thread(wait_healthy_again, first, old)
    tally.back_after_s.append(back_s)
    print(f"{time.strftime('%H:%M:%S')} {first.label} healthy again {back_s:.0f} s after the kill", flush=True)
    rejoined_s = await asyncio.to_thread(wait_in_rotation, router, first)
    print(f"{time.strftime('%H:%M:%S')} the router routes to {first.label} again, {rejoined_s:.0f} s later", flush=True)
    old = kill(second, "engine core", tally, kills)
    back_s = await asyncio.to_thread(wait_healthy_again, second, old)
    tally.back_after_s.append(back_s)
    print(f"{time.strftime('%H:%M:%S')} {second.label} healthy again {back_s:.0f} s after the kill", flush=True)
    await asyncio.sleep(settle_s)
    stop.set()
    await clients
    return tally, time.monotonic() - started


def recorded_seqs(port: int) -> str:
    """MAX_NUM_SEQS as the replica on `port` was started with (its record), not as the settings would resolve now."""
    record = run_record.live(port)
    plan = record.plan if record is not None else None
    return "unknown" if plan is None or plan.max_num_seqs is None else str(plan.max_num_seqs)


@dataclass(slots=True)
class Soaked:
    """What one soak found: the requests' fates, each engine's gauges after, each group's RSS, strays."""

    max_num_seqs: str  # as the first replica was started with (its record)
    tally: Tally
    load_s: float
    after: dict[str, tuple[float, float, float]]  # running, waiting, KV usage per engine after the load
    warm_mib: dict[str, float]  # each group's RSS after warm-up
    end_mib: dict[str, float]  # ... and at the end
    strays: list[str]

    @property
    def requests(self) -> int:
        return self.tally.completed + self.tally.hung_up + len(self.tally.cut) + len(self.tally.other)

    def verdicts(self) -> dict[str, bool]:
        tally, warm, end = self.tally, self.warm_mib, self.end_mib
        return {
            "nothing but completed, hung up or cut by a kill": not tally.other,
            "no more cut than the victims held (+2 each the router had just sent)": len(tally.cut)
            <= sum(tally.in_flight_at_kill) + 2 * len(tally.in_flight_at_kill),
            "KV usage back to 0, nothing running or waiting": all(g == (0, 0, 0) for g in self.after.values()),
            "no kit process outside the recorded groups": not self.strays,
            f"every group's RSS within {RSS_BOUND}x of after warm-up": all(end[k] <= RSS_BOUND * warm[k] for k in warm),
        }


def soak_replicas(settings: Settings, users: int, kill_after_s: int, settle_s: int) -> Soaked:
    """Start two supervised replicas behind the router, warm them, soak them while killing each once, stop them."""
    before = checkout_processes()
    started = runtimes.vllm_runtimes(settings)
    engines = [runtime for runtime in started[:-1] if isinstance(runtime, NativeRuntime)]
    servers = [runtime for runtime in started if isinstance(runtime, LocalRuntime)]
    router = started[-1]
    assert isinstance(router, RouterRuntime)
    with running(started):
        measure(settings, settings.base_url, 4, plain_messages(8), 32)  # warm-up: every replica has served
        seqs = recorded_seqs(engines[0].port)
        print(
            f"benchmarks.soak: {users} users on {settings.base_url} (2 replicas, max-num-seqs "
            f"{seqs} each), {HANG_UP_SHARE:.0%} hang up mid-stream",
            flush=True,
        )
        warm = groups_rss_mib(servers)
        tally, load_s = asyncio.run(soak(settings, engines, router, users, kill_after_s, settle_s))
        time.sleep(5)  # aborts reach the engines' gauges
        after = {runtime.label: gauges(runtime.base_url) for runtime in engines}
        return Soaked(seqs, tally, load_s, after, warm, groups_rss_mib(servers), strays(servers, before))


def print_soaked(soaked: Soaked, verdicts: dict[str, bool]) -> None:
    tally, warm, end = soaked.tally, soaked.warm_mib, soaked.end_mib
    print(
        f"\n{soaked.requests} requests in {soaked.load_s:.0f} s of load: {tally.completed} completed, {tally.hung_up} "
        f"aborted by their own client, {len(tally.cut)} in flight on a killed process (the victims held "
        f"{' and '.join(f'{n:g}' for n in tally.in_flight_at_kill)} running + waiting), {len(tally.other)} other"
    )
    for error in sorted(set(tally.cut))[:5]:
        print(f"  cut: {error}")
    for error in tally.other[:5]:
        print(f"  OTHER: {error}")
    for label, (running_now, waiting_now, kv) in soaked.after.items():
        print(f"{label}: {running_now:g} running, {waiting_now:g} waiting, KV usage {kv:.1%} after the load")
    print("| group | RSS after warm-up MiB | RSS at the end MiB | end / start |\n|---|---|---|---|")
    for label in warm:
        print(f"| {label} | {warm[label]:.0f} | {end[label]:.0f} | {end[label] / max(warm[label], 1):.2f} |")
    for what, ok in verdicts.items():
        print(f"{'PASS' if ok else 'FAIL'}: {what}")
    if soaked.strays:
        print("  strays: " + "; ".join(soaked.strays))


def main() -> None:
    parser = KitArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=positive_int, default=48, help="closed-loop users (above capacity)")
    parser.add_argument("--kill-after-s", type=positive_int, default=30, help="load before the first kill")
    parser.add_argument("--settle-s", type=positive_int, default=20, help="load after the second replica is back")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"folder for results.json (default: {DEFAULT_OUT})"
    )
    args = parser.parse_args()
    base = dataclasses.replace(Settings.load(), runtime="native", replicas=2, restart="on-failure")
    settings = dataclasses.replace(base, port=process.free_port_run("127.0.0.1", 4))
    soaked = soak_replicas(settings, args.users, args.kill_after_s, args.settle_s)
    verdicts = soaked.verdicts()
    print_soaked(soaked, verdicts)
    tally = soaked.tally
    found = {
        "users": args.users,
        "kill_after_s": args.kill_after_s,
        "settle_s": args.settle_s,
        "max_num_seqs": soaked.max_num_seqs,
        "requests": soaked.requests,
        "load_s": soaked.load_s,
        "completed": tally.completed,
        "aborted_by_client": tally.hung_up,
        "in_flight_on_killed": len(tally.cut),
        "other": len(tally.other),
        "victims_running_and_waiting_before": tally.in_flight_at_kill,
        "back_after_s": tally.back_after_s,
        "rss_end_over_warm": [soaked.end_mib[label] / max(soaked.warm_mib[label], 1) for label in soaked.warm_mib],
        "verdicts": verdicts,
        "strays": soaked.strays,
    }
    command = command_line("python -m benchmarks.soak", sys.argv[1:])
    engines_measured = [MeasuredEngine(settings.model_name, "http://127.0.0.1 (free ports)", "vllm")]
    write(args.out / "results.json", Envelope.now(command, engines_measured), found)
    print(f"Wrote {args.out / 'results.json'}")
    if not all(verdicts.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
