"""Where one decode step of the kit's vLLM goes, at 1 and at 16 sequences: py-spy on all three processes.

    .venv/bin/python -m benchmarks.step_profile

It starts the kit's engine (the settings in .env, plus KEY=VALUE overrides: `--set ENFORCE_EAGER=true` shows
the model's layers, which the compiled graph hides) on free ports, keeps a closed loop of N users decoding
(ignore_eos), and for each load point:

1. counts the engine's steps (`vllm:iteration_tokens_total`, one observation per engine step) and its
   output tokens over a window with nothing attached: the step time as the load tester sees it;
2. samples vLLM's three processes (API server, engine core, worker) with py-spy over a second window of the
   same length (`--nonblocking`: py-spy never pauses them), and counts the steps again: what sampling cost;
3. sorts every sample of each process's main thread into what it was doing (CATEGORIES below, the first
   match from the top of the list wins), and prints each as its share and as that share of the step time
   measured in window 1 (sampling slows the engine; the shares are what it shows).

vLLM runs the three processes concurrently (the API server on the other core), so their rows add up per
process, not across processes: the worker's rows are the step; the others say what runs beside it and
what the worker waits for. It writes results.json (the tables, with the envelope of labs/results.py) and the
folded stacks of every window (`*.folded`, for flamegraph.pl or speedscope), and the op calls of the compiled step
the engine runs (benchmarks/step_ops.py: inductor's wrapper, Python or C++, counted).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks import step_ops
from benchmarks.arms import Arm, RunningArm, add_cpu_isa_argument, parse_overrides, serving, use_cpu_isa
from benchmarks.roofline import Bandwidth, measure_bandwidth
from client.endpoint import Endpoint, EndpointError
from client.stream import RequestRecord, chat_payload, closed_loop, stream_chat
from labs.results import Envelope, MeasuredEngine, ResultsError, command_line, load, write
from serve.config.machine import detect
from serve.config.paths import ROOT
from serve.engines.vllm_log import compiled_artifact
from serve.processes.metrics import scrape
from ui.cli import KitArgumentParser, positive_float, positive_int, positive_ints
from ui.progress import StepFailed, console, fail
from ui.values import SettingsError

DEFAULT_USERS = "1,16"
DEFAULT_WINDOW_S = 8.0
DEFAULT_RATE_HZ = 100  # 250 cost the engine +33-65% step time on 2 cores (three py-spy at once)
DEFAULT_OUT = ROOT / "results" / "step_profile"
ANSWER_TOKENS = 200  # long answers: the loop is in decode, a prefill only every 200 steps per user
SETTLE_S = 3.0  # after the users start: every one of them is decoding
PROMPT = "Write a long story about a lighthouse keeper and the sea."


@dataclass(frozen=True, slots=True)
class Rule:
    """A category: a function on the stack names one of `any_of`, and, if given, another one of `within`."""

    name: str
    any_of: tuple[str, ...]
    within: tuple[str, ...] = ()
    key: str = ""  # its short name in results.json where key_of(name) would repeat another's in its process

    def matches(self, functions: list[str]) -> bool:
        def found(markers: tuple[str, ...]) -> bool:
            return any(marker in function for function in functions for marker in markers)

        return found(self.any_of) and (not self.within or found(self.within))


LINEAR = ("Linear",)  # vLLM's ColumnParallelLinear, RowParallelLinear (QKV, O, gate/up, down), UnquantizedLinearMethod
# What a process's main thread was doing, by the function names on its stack (py-spy's "Class.method" names, read
# in vLLM 0.32's stacks); the first rule that matches wins, so the narrower ones come first.
CATEGORIES: dict[str, tuple[Rule, ...]] = {
    "worker": (
        Rule("sampling", ("Sampler.", "TopKTopPSampler")),
        Rule("lm head (logits)", ("compute_logits", "LogitsProcessor")),
        Rule("attention: the paged-attention kernel", ("unified_attention", "cpu_attention", "BackendImpl.forward")),
        Rule("attention: QKV and output projections", LINEAR, within=("LlamaAttention.",), key="qkv-out"),
        Rule("MLP: gate/up and down projections", LINEAR, within=("LlamaMLP.",)),
        Rule("RMSNorm", ("RMSNorm", "rms_norm")),
        Rule("MLP: SiLU and multiply", ("SiluAndMul", "silu"), key="silu"),
        Rule("rotary embedding", ("RotaryEmbedding", "rotary")),
        Rule(
            "model forward, the rest (compiled graph, embedding, residuals)",
            ("LlamaDecoderLayer.", "LlamaModel.", "LlamaForCausalLM.", "_model_forward", "Compiled", "compile"),
        ),
        Rule("preparing inputs", ("_prepare_inputs", "_update_states", "_prepare", "InputBatch", "block_table")),
        Rule("waiting for the engine core (shm queue)", ("dequeue", "acquire_read", "SpinCondition")),
        Rule("returning outputs", ("enqueue", "acquire_write", "ModelRunnerOutput", "_bookkeeping")),
    ),
    "engine core": (
        Rule("scheduling", ("Scheduler.schedule",)),
        Rule("updating from the step's output", ("update_from_output",)),
        Rule(
            "waiting for the worker (its model step)",
            ("execute_model", "collective_rpc", "FutureWrapper", "get_response", "dequeue", "sample_tokens"),
        ),
        Rule("taking in requests", ("_handle_client_request", "add_request")),
        Rule("idle (waiting for requests)", ("_process_input_queue", "Queue.get"), key="idle-requests"),
    ),
    "api server": (
        Rule(
            "detokenizing, output processing",
            ("OutputProcessor", "detokenize", "Detokenizer", "process_outputs", "output_handler"),
        ),
        Rule(
            "OpenAI streaming (serving_chat)",
            ("chat_completion_stream_generator", "serving_chat", "OpenAIServingChat", "create_chat_completion"),
        ),
        Rule("HTTP (uvicorn, starlette)", ("uvicorn", "starlette", "h11", "httptools", "fastapi")),
    ),
}
# A stack that ends in one of these is waiting, not working: the API server's event loop with nothing to run
# (uvloop's C loop under asyncio's Runner.run), a poll, a lock.
IDLE_LEAVES = ("Runner.run", "select", "poll", "Condition.wait", "_run_once")
IDLE = "idle (waiting for something to do)"
NATIVE = "no Python frame (in C code outside any Python call)"
OTHER = "other"
ROLES = ("worker", "engine core", "api server")


@dataclass(slots=True)
class Window:
    """One stretch of the closed loop: the engine's own counts at its ends."""

    seconds: float
    steps: float
    tokens: float

    @property
    def step_ms(self) -> float:
        return 1000 * self.seconds / self.steps if self.steps else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")


@dataclass(slots=True)
class Profile:
    """One process's main-thread samples over a window, sorted into categories."""

    role: str
    pid: int
    samples: int
    by_category: Counter = field(default_factory=Counter)


MODEL_IN_ENGINE_CORE = "engine core (runs the model)"  # VLLM_ENABLE_V1_MULTIPROCESSING=false: no worker process


def roles(api_pid: int) -> dict[str, int]:
    """vLLM's processes by role: the API server (the pid started), its EngineCore, and the Worker, which vLLM
    names in their process titles ("VLLM::EngineCore", "VLLM::Worker"). Without multiprocessing the engine
    core runs the model itself: two processes, the engine core's role then MODEL_IN_ENGINE_CORE."""
    found = {"api server": api_pid}
    for child in psutil.Process(api_pid).children(recursive=True):
        try:
            title = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "EngineCore" in title:
            found["engine core"] = child.pid
        elif "Worker" in title:
            found["worker"] = child.pid
    if "engine core" in found and "worker" not in found:
        found[MODEL_IN_ENGINE_CORE] = found.pop("engine core")
        return found
    missing = [role for role in ROLES if role not in found]
    if missing:
        raise StepFailed(f"cannot find vLLM's {' and '.join(missing)} under pid {api_pid}")
    return found


def categorize(stack: list[str], role: str) -> str:
    """The category of one sample, by the function names on its stack (py-spy's "name (file:line)" frames;
    the files are left out: vllm/v1/attention/ holds more than attention)."""
    functions = [frame.split(" (", 1)[0] for frame in stack]
    if not functions:
        return NATIVE
    rules = CATEGORIES["worker"] + CATEGORIES["engine core"] if role == MODEL_IN_ENGINE_CORE else CATEGORIES[role]
    for rule in rules:
        if rule.matches(functions):
            return rule.name
    if any(marker in functions[-1] for marker in IDLE_LEAVES):
        return IDLE
    return OTHER


def read_folded(path: Path, role: str, pid: int) -> Profile:
    """py-spy's raw output (`thread (tid): name;frame;frame count`): the main thread's samples, sorted."""
    profile = Profile(role, pid, 0)
    threads: Counter = Counter()
    lines = []
    for line in path.read_text().splitlines():
        stack_text, _, count = line.rpartition(" ")
        if not stack_text or not count.isdigit():
            continue
        thread, *frames = stack_text.split(";")
        threads[thread] += int(count)
        lines.append((thread, frames, int(count)))
    main = next((thread for thread in threads if "MainThread" in thread), None)
    if main is None and threads:
        main = threads.most_common(1)[0][0]
    for thread, frames, num_samples in lines:
        if thread == main:
            profile.samples += num_samples
            profile.by_category[categorize(frames, role)] += num_samples
    return profile


def py_spy() -> str:
    """The py-spy installed with the light tools: beside this interpreter (.venv/bin)."""
    return str(Path(sys.executable).parent / "py-spy")


def folded_path(folder: Path, users: int, role: str) -> Path:
    return folder / f"{users}-users-{role.replace(' ', '-')}.folded"


class Users:
    """A closed loop of `count` users sending long answers until stopped, on a thread of its own."""

    def __init__(self, endpoint: Endpoint, count: int) -> None:
        self.endpoint = endpoint
        self.count = count
        self.records: list[RequestRecord] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _turn(self, http: httpx.AsyncClient, number: int) -> bool:
        if self._stop.is_set():
            return False
        record = RequestRecord(len(self.records), ANSWER_TOKENS, time.perf_counter())
        payload = chat_payload(
            self.endpoint.model, [{"role": "user", "content": f"{PROMPT} ({number})"}], ANSWER_TOKENS, ignore_eos=True
        )
        self.records.append(
            await stream_chat(http, self.endpoint.base_url, payload, record, self.endpoint.api_key or None)
        )
        return True

    async def _run(self) -> None:
        await closed_loop(self.count, self._turn)

    def __enter__(self) -> Users:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def counted(root_url: str, during: Callable[[], object]) -> Window:
    """The engine's steps and output tokens while `during` runs."""
    before, started = scrape(root_url), time.perf_counter()
    during()
    after = scrape(root_url)
    return Window(
        time.perf_counter() - started,
        after.engine_steps_total - before.engine_steps_total,
        after.generation_tokens_total - before.generation_tokens_total,
    )


def sample(pids: dict[str, int], seconds: float, rate_hz: int, out: Path, users: int) -> list[Profile]:
    """py-spy on every process at once, for `seconds`; their main threads' samples, sorted."""
    procs = []
    for role, pid in pids.items():
        path = folded_path(out, users, role)
        argv = [
            py_spy(),
            "record",
            "--format",
            "raw",
            "--idle",
            "--threads",
            "--nonblocking",
            "--rate",
            str(rate_hz),
            "--duration",
            str(round(seconds)),
            "--pid",
            str(pid),
            "--output",
            str(path),
        ]
        procs.append(
            (role, pid, path, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        )
    profiles = []
    for role, pid, path, proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0 or not path.exists():
            raise StepFailed(f"py-spy could not sample the {role} (pid {pid}): {err.strip()[-300:]}")
        profiles.append(read_folded(path, role, pid))
    return profiles


def per_step(profile: Profile, window: Window) -> list[dict[str, Any]]:
    """Each category of a process as a share of its main thread's samples, and that share of the step time
    measured without py-spy (`window`): sampling slows the engine, the shares are what it shows."""
    rows = []
    for name, count in profile.by_category.most_common():
        share = count / profile.samples
        rows.append({"category": name, "key": key_of(name), "share": share, "ms_per_step": share * window.step_ms})
    return rows


def key_of(category: str) -> str:
    """A category's short name, for a page's pointer into results.json: 'lm head (logits)' -> 'lm-head'."""
    keys = {rule.name: rule.key for rules in CATEGORIES.values() for rule in rules if rule.key}
    return keys.get(category) or re.split(r"[:,(]", category)[0].strip().replace("'", "").replace(" ", "-").lower()


def profile_point(endpoint: Endpoint, pids: dict[str, int], users: int, args: argparse.Namespace) -> dict[str, Any]:
    with Users(endpoint, users) as load:
        time.sleep(SETTLE_S)
        plain = counted(endpoint.root_url, lambda: time.sleep(args.window))
        profiles: list[Profile] = []
        profiled = counted(
            endpoint.root_url, lambda: profiles.extend(sample(pids, args.window, args.rate, args.out, users))
        )
    failed = [record for record in load.records if record.status is not None and not record.ok]
    if failed:
        raise StepFailed(f"{len(failed)} of the profile's requests failed: {failed[0].error or failed[0].status}")
    return described(users, plain, profiled, profiles)


def described(users: int, plain: Window, profiled: Window, profiles: list[Profile]) -> dict[str, Any]:
    """One load point as results.json keeps it, printed on the way."""
    console.print(
        f"\n[bold]{users} user(s)[/bold]: a step every {plain.step_ms:.1f} ms, "
        f"{plain.tokens_per_s:.1f} output tok/s; while sampled {profiled.step_ms:.1f} ms, "
        f"{profiled.tokens_per_s:.1f} tok/s (py-spy's cost: {profiled.step_ms / plain.step_ms - 1:+.0%})"
    )
    processes = {}
    for profile in profiles:
        rows = per_step(profile, plain)
        processes[profile.role] = {"pid": profile.pid, "samples": profile.samples, "rows": rows}
        console.print(f"  {profile.role} ({profile.samples} samples)")
        for row in rows:
            console.print(f"    {row['category']:<62} {row['ms_per_step']:6.1f} ms  {row['share']:6.1%}")
    return {"users": users, "plain": window_dict(plain), "profiled": window_dict(profiled), "processes": processes}


def weights_floor(weight_bytes: int, bandwidth: Bandwidth, step_ms: float) -> dict[str, float]:
    """The part of a step no kernel can beat: every weight read once, at the bandwidth measured in this run."""
    read_ms = 1000 * weight_bytes / bandwidth.copy_bytes_per_s
    console.print(
        f"  reading the weights once ({weight_bytes / 1e6:.0f} MB at {bandwidth.copy_bytes_per_s / 1e9:.1f} GB/s): "
        f"{read_ms:.1f} ms of the {step_ms:.1f} ms step; the other {step_ms - read_ms:.1f} ms are compute and overhead"
    )
    return {
        "weight_bytes": weight_bytes,
        "bandwidth_bytes_per_s": bandwidth.copy_bytes_per_s,
        "read_ms": read_ms,
        "rest_ms": step_ms - read_ms,
    }


def reread(folder: Path) -> tuple[Envelope, dict[str, Any]]:
    """A finished profile's stacks sorted again (after a change to CATEGORIES): nothing is run."""
    envelope, payload = load(folder / "results.json")
    for number, point in enumerate(payload["points"]):
        plain, profiled = (
            Window(raw["seconds"], raw["steps"], raw["output_tokens"]) for raw in (point["plain"], point["profiled"])
        )
        profiles = [
            read_folded(folded_path(folder, point["users"], role), role, process["pid"])
            for role, process in point["processes"].items()
        ]
        kept = {"weights": point["weights"]} if "weights" in point else {}
        payload["points"][number] = described(point["users"], plain, profiled, profiles) | kept
    return envelope, payload


def window_dict(window: Window) -> dict[str, float]:
    return {
        "seconds": window.seconds,
        "steps": window.steps,
        "output_tokens": window.tokens,
        "step_ms": window.step_ms,
        "output_tokens_per_s": window.tokens_per_s,
    }


def listening_pid(api_url: str) -> int:
    """The process listening on the port of `api_url` (a server this benchmark did not start)."""
    port = httpx.URL(api_url).port
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return conn.pid
    raise StepFailed(
        f"no process of this machine listens on port {port} ({api_url}): py-spy samples local "
        "processes only; start the kit's server here (bash up.sh) or leave out --attach"
    )


def build_parser() -> KitArgumentParser:
    parser = KitArgumentParser(prog="python -m benchmarks.step_profile", description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=positive_ints, default=DEFAULT_USERS, help="load points, users at once")
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="settings on top of the kit's, e.g. ENFORCE_EAGER=true",
    )
    parser.add_argument(
        "--attach",
        metavar="URL",
        help="profile the vLLM already running at this /v1 URL "
        "(this machine's) instead of starting one, e.g. http://127.0.0.1:8009/v1",
    )
    add_cpu_isa_argument(parser)
    parser.add_argument("--window", type=positive_float, default=DEFAULT_WINDOW_S, help="seconds per window")
    parser.add_argument("--rate", type=positive_int, default=DEFAULT_RATE_HZ, help="py-spy samples a second")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json and the stacks")
    parser.add_argument(
        "--reread",
        type=Path,
        metavar="FOLDER",
        help="sort the stacks of an earlier profile in FOLDER again, and rewrite its results.json",
    )
    return parser


def profile(args: argparse.Namespace, arm: Arm, served: RunningArm) -> dict[str, Any]:
    endpoint = Endpoint.at(
        "kit", served.api_url, served.model, kind="vllm", url_source="--attach", model_source="MODEL_NAME"
    )
    endpoint.check()
    pids = roles(served.pid if served.pid is not None else listening_pid(served.api_url))
    threads = detect().usable_cores
    with console.status(f"Measuring memory bandwidth (numpy copy, {threads} threads)"):
        bandwidth = measure_bandwidth(threads)
    points = [profile_point(endpoint, pids, count, args) for count in args.users]
    for point in points:
        point["weights"] = weights_floor(served.weight_bytes, bandwidth, point["plain"]["step_ms"])
    ops = step_ops_of(served)
    envelope = Envelope.now(
        command_line("python -m benchmarks.step_profile", args.argv),
        [MeasuredEngine(served.model, endpoint.root_url, "vllm")],
    )
    return {
        "envelope": envelope,
        "payload": {
            "settings": dict(arm.overrides),
            "resolved": served.resolved,
            "machine": {"isa": detect().isa, "isa_stand_in": args.cpu_isa is not None, "usable_cores": threads},
            "points": points,
            "step_ops": None if ops is None else step_ops.as_dict(ops),
        },
    }


def step_ops_of(served: RunningArm) -> step_ops.StepOps | None:
    """The op calls of the compiled step the profiled engine runs, counted in inductor's wrapper (None: an eager
    engine, or one this benchmark did not start)."""
    if served.log_path is None:
        return None
    artifact = compiled_artifact(served.log_path.read_text(errors="replace"))
    if artifact is None:
        return None
    ops = step_ops.of_artifact(Path(artifact))
    console.print(f"  the compiled step: {ops.total_op_calls} op calls through inductor's {ops.wrapper} wrapper")
    return ops


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    try:
        if args.reread is not None:
            write(args.reread / "results.json", *reread(args.reread))
            return
        arm = Arm("kit", "vllm", parse_overrides(args.set), "the kit's defaults", attach_url=args.attach)
        use_cpu_isa(args.cpu_isa)
        args.out.mkdir(parents=True, exist_ok=True)
        with serving(arm) as served:
            found = profile(args, arm, served)
        path = write(args.out / "results.json", found["envelope"], found["payload"])
        console.print(f"\nWrote {path} and the stacks beside it")
    except (ValueError, SettingsError, StepFailed, EndpointError, ResultsError) as exc:
        fail(str(exc))


if __name__ == "__main__":
    main()
