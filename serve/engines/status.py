"""`python -m serve status`: one line per engine the kit runs, as `ollama ps` lists its models.

A line joins three sources: the record `up` wrote (the engine, the model, its weights, the port, since when:
serve/processes/run_record.py), the process group (its memory: the RSS of every process in it, engine core and
workers included) and what the engine reports now (/metrics: requests running and waiting, KV-cache use;
serve/processes/metrics.py, on serve's floor so that status may read it). Below the table, what the supervisor saw
(restarts and the last crash, with the log's root cause) and each engine of ENGINES that does not run, and why.

Exit: 0 when every engine of ENGINES is healthy, else the worst: 1 unhealthy (starting, restarting, orphaned),
3 down.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import psutil

from serve.config.settings import Settings
from serve.engines import runtimes
from serve.engines.runtime import Runtime
from serve.processes import process, run_record
from serve.processes.local_server import LocalRuntime, condition
from serve.processes.metrics import NoMetrics, scrape
from serve.processes.run_record import RunRecord
from serve.processes.supervisor import Record

HEALTHY, UNHEALTHY, DOWN = 0, 1, 3
METRICS_TIMEOUT_S = 3.0
COLUMNS = (
    "ENGINE",
    "MODEL",
    "WEIGHTS",
    "PORT",
    "PID",
    "MEMORY",
    "UPTIME",
    "RUNNING",
    "WAITING",
    "KV CACHE",
    "LAST CRASH",
)
GAP = "   "
NONE = "-"


@dataclass(frozen=True, slots=True)
class State:
    """One engine as status finds it: its exit code, its table row while it runs, and what to say below the table."""

    code: int
    row: tuple[str, ...] | None
    lines: list[str]


def duration(seconds: float) -> str:
    """'45 s', '12 min', '3 h 05 min', '2 days': how long, as a person reads it."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"
    return f"{seconds // 86400:.0f} days"


def group_rss_bytes(pgid: int) -> int:
    """Resident memory of every process in the group (pages shared between them counted in each)."""
    total = 0
    for pid in process.group_members(pgid):
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total


def megabytes(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:,.0f} MB"


def metrics_cells(record: RunRecord | None, base_url: str) -> tuple[str, str, str]:
    """Requests running, waiting and the KV cache's use, from /metrics; '-' for an engine without vLLM's."""
    if record is not None and record.runtime == "router":  # its replicas' lines show theirs
        return NONE, NONE, NONE
    try:
        snapshot = scrape(base_url, METRICS_TIMEOUT_S)
    except (NoMetrics, httpx.HTTPError):
        return NONE, NONE, NONE
    kv = NONE
    if snapshot.kv_usage is not None:
        tokens = snapshot.cache_config.get("kv_cache_size_tokens", "")
        kv = f"{snapshot.kv_usage:.0%}" + (f" of {int(tokens):,} tokens" if tokens.isdigit() else "")
    cap = record.plan.max_num_seqs if record is not None and record.plan is not None else None
    running = f"{snapshot.running:g}" + ("" if cap is None else f"/{cap}")  # of the batch it may run (MAX_NUM_SEQS)
    return running, f"{snapshot.waiting:g}", kv


def since_s(record: RunRecord | None, events: Record | None, pgid: int) -> float | None:
    """When what answers now started: its last healthy start under the supervisor, else `up`'s record, else the
    process group's leader."""
    healthy = events.last("healthy") if events is not None else None
    if healthy is not None:
        return healthy.at
    if record is not None:
        return record.started_at
    return process.start_time(pgid)


def last_crash(events: Record | None) -> str:
    crash = events.last("crashed", "gave-up") if events is not None else None
    return NONE if crash is None else f"{duration(time.time() - crash.at)} ago, {crash.how}"


def row(runtime: Runtime, record: RunRecord | None, pgid: int, events: Record | None) -> tuple[str, ...]:
    weights = record.weights if record is not None else None
    started = since_s(record, events, pgid)
    return (
        runtime.label if runtime.name in ("native", "router") else f"{runtime.label} ({runtime.name})",
        record.served_model if record is not None else runtime.served_model,
        NONE if weights is None else f"{weights.format}, {weights.megabytes}",
        str(runtime.port),
        str(pgid),
        megabytes(group_rss_bytes(pgid)),
        NONE if started is None else duration(time.time() - started),
        *metrics_cells(record, runtime.base_url),
        last_crash(events),
    )


def state(runtime: Runtime) -> State:
    """The engine `runtime` serves, as status shows it."""
    record = run_record.live(runtime.port)
    if isinstance(runtime, LocalRuntime):  # a supervised local server: it tells a crash from a stop
        code, lines = condition(runtime.server)
        pgid, events = runtime.running_pid(), runtime.server.record()
        if code == HEALTHY and not (events and events.restarts):  # the row says all
            lines = []
        eager = getattr(runtime, "eager_server", None)  # a hand-over under way (serve/engines/hand_over.py)
        eager_pgid = eager.running_pid() if eager is not None else None
        if eager is not None and eager_pgid is not None:
            since = eager.pidfile.recorded_start_time()
            so_far = f", {time.time() - since:.0f} s so far" if since else ""
            lines = [
                *lines,
                f"{eager.label} answers on port {runtime.port} (pid {eager_pgid}) until the compiled engine takes the "
                f"port over{so_far}; the compiled one's log: {runtime.server.log_path}",
            ]
            pgid = pgid or eager_pgid
            if code == DOWN:  # the compiled engine stopped, but the eager one still answers
                code = UNHEALTHY
    else:
        pgid, events = runtime.running_pid(), None
        if pgid is None:
            return State(
                DOWN, None, [f"{runtime.label} down: no {runtime.label} started by this kit on port {runtime.port}"]
            )
        code = HEALTHY if runtime.healthy() else UNHEALTHY
        lines = (
            [] if code == HEALTHY else [f"{runtime.label} up: pid {pgid}, starting or unhealthy, {runtime.base_url}/v1"]
        )
    if pgid is None:
        return State(code, None, lines)
    if record is None:
        lines = [
            *lines,
            f"{runtime.label} on port {runtime.port}: no record of what up started it with "
            f"({run_record.record_path(runtime.port)}): its weights and plan are unknown here, its line shows what "
            "the process and /metrics say (bash down.sh, then bash up.sh, writes one)",
        ]
    return State(code, row(runtime, record, pgid, events), lines)


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """The rows under COLUMNS, each column as wide as its widest cell (plain text: it never wraps)."""
    widths = [max(len(cells[index]) for cells in [COLUMNS, *rows]) for index in range(len(COLUMNS))]
    return [
        GAP.join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
        for cells in [COLUMNS, *rows]
    ]


def report(settings: Settings) -> tuple[int, list[str]]:
    """(exit code, lines): every engine of ENGINES, then any other engine a live record says this checkout runs (on
    ports these settings do not name: ENGINES or a port changed since its `up`)."""
    ours = runtimes.for_engines(settings)
    states = [state(runtime) for runtime in ours]
    rows = [item.row for item in states if item.row is not None]
    known = {runtime.port for runtime in ours}
    others = [record for record in run_record.every() if record.port not in known and record.alive()]
    for record in others:
        rows.append(
            (
                f"{record.label} (beyond these settings)",
                record.served_model,
                NONE if record.weights is None else f"{record.weights.format}, {record.weights.megabytes}",
                str(record.port),
                str(record.pid),
                megabytes(group_rss_bytes(record.pid)),
                duration(record.uptime_s),
                *metrics_cells(record, record.base_url),
                NONE,
            )
        )
    lines = [] if any(item.row for item in states) else [f"Nothing runs of ENGINES={','.join(settings.engines)}."]
    lines += table(rows) if rows else []
    for item in states:
        lines += [line for line in item.lines if line]
    return max(item.code for item in states), lines
