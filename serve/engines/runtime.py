"""The one shape of every engine the kit serves: what `python -m serve up|down|status|install` drives.

vLLM on the native venv or in a compose service, llama.cpp's server: each is a `Runtime`. `up`, `down`,
`status` and `install` loop over the runtimes of ENGINES (serve/engines/runtimes.py) and never ask which is which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from serve.config import preflight
from serve.config.model import served_model_facts
from serve.config.plan import Plan
from serve.config.settings import Settings
from serve.config.sizing import ModelFacts
from serve.install import system
from serve.processes import run_record
from serve.processes.health import kv_cache_report
from serve.processes.run_record import RunRecord, Weights
from ui.progress import console


class Recorded(Protocol):
    """What every record names of the runtime that started the engine."""

    engine: str
    name: str
    label: str
    port: int
    engine_version: str
    picked_because: str

    @property
    def base_url(self) -> str: ...

    @property
    def served_model(self) -> str: ...

    @property
    def log_path(self) -> Path: ...


def started_record(runtime: Recorded, pid: int, argv: list[str], env: dict[str, str], **facts: Any) -> RunRecord:
    """The record `up` writes of an engine `runtime` started: who it is, its process, its command line and the
    environment it runs with; `facts`, what the engine adds (its max_model_len, weights, plan, notes)."""
    return RunRecord(
        engine=runtime.engine,
        runtime=runtime.name,
        label=runtime.label,
        port=runtime.port,
        base_url=runtime.base_url,
        served_model=runtime.served_model,
        engine_version=runtime.engine_version,
        runtime_reason=runtime.picked_because,
        **run_record.stamp(pid),
        argv=tuple(argv),
        env=env,
        log_path=str(runtime.log_path),
        **facts,
    )


@dataclass(frozen=True, slots=True)
class Started:
    """An engine `start` brought up: what `up` records of it (serve/processes/run_record.py) and how long it took."""

    record: RunRecord
    seconds_to_healthy: float

    @property
    def pid(self) -> int:
        return self.record.pid

    @property
    def plan(self) -> Plan | None:
        """The `auto` settings as vLLM got them; None for an engine without any."""
        return self.record.plan

    @classmethod
    def recorded(cls, record: RunRecord, seconds_to_healthy: float) -> Started:
        """An engine that answers now, its record written (.kit/run/<port>.json): whoever started it (`up`, the tour,
        a benchmark), what runs there is on record for every reader; its runtime's stop removes it."""
        run_record.write(record)
        return cls(record, seconds_to_healthy)


class Runtime(Protocol):
    """One engine on one port, started, checked and stopped by this kit."""

    engine: str  # the Engine it serves, by its name in ENGINES: "vllm", "llamacpp"
    label: str  # what users call the engine: "vLLM", "llama.cpp"
    # the runtime's own name, how it runs: RUNTIME's value ("native", "docker", "docker-gpu"), "router" in front of
    # REPLICAS; never the engine's (a GGUF engine's server runs "native")
    name: str
    port: int
    picked_because: str  # why RUNTIME=auto chose this runtime (serve/engines/runtimes.py); "" when it was asked for

    @property
    def base_url(self) -> str: ...

    @property
    def log_path(self) -> Path:
        """The engine's own output."""
        ...

    @property
    def served_model(self) -> str:
        """The model name clients ask for."""
        ...

    def system_needs(self) -> list[system.Tool]:
        """Programs this machine must have before install or start (MissingTools for a platform it cannot run on)."""
        ...

    def install(self) -> None:
        """What `python -m serve install` readies ahead of the first start: venv, model. Nothing for an image."""
        ...

    def preflight(self) -> Plan | None:
        """Refuse (SettingsError) a configuration it could not start with; the plan `start` then takes."""
        ...

    def running_pid(self) -> int | None: ...

    def healthy(self) -> bool: ...

    def start(self, plan: Plan | None = None, *, serve_early: bool = False) -> Started:
        """Start and wait until it answers, with what `up` records of it; on failure it is stopped and its log
        shown (StepFailed). `serve_early` (up's own start): it may answer from a stand-in while the engine itself
        builds (native vLLM: SERVE_WHILE_COMPILING, serve/engines/hand_over.py); the benchmarks' starts never do."""
        ...

    def stop(self, quiet: bool = False) -> bool:
        """Stop what this kit started; False if nothing was running."""
        ...

    def recap_rows(self, started: Started | None) -> list[tuple[str, str]]:
        """Rows the recap after `up` adds for this engine (`started` is None when it was already up)."""
        ...


class VllmRuntime:
    """What the native and Docker runtimes share: the engine is vLLM, its `auto` settings are resolved into
    a plan, and the preflight judges that plan before anything starts."""

    engine = "vllm"
    label = "vLLM"
    name: str
    picked_because = ""
    log_path: Path
    port: int
    engine_version = "vLLM"  # the vLLM it runs, as a report names it: set by `start` once it knows

    if TYPE_CHECKING:  # read-only here: the native runtime is given its settings, Docker's caps CPU_LIMIT in them

        @property
        def settings(self) -> Settings: ...

        base_url: str

    @property
    def served_model(self) -> str:
        return self.settings.model_name

    def resolve(self) -> Plan:
        """Every `auto` setting as this runtime will start with it."""
        raise NotImplementedError

    def preflight(self) -> Plan:
        resolved = self.resolve()
        verdict = preflight.run(self.settings, resolved, self.name)  # refuses (exit 2) what vLLM could not start with
        for line in verdict.lines():
            console.print(line)
        return resolved

    def where_rows(self) -> list[tuple[str, str]]:
        """Rows about where it runs (a container's caps); none for a local process."""
        return []

    def weights(self, plan: Plan, model: str) -> Weights:
        """The weights it serves as `plan` runs them (`model`: what vLLM is given as --model)."""
        facts = served_model_facts(self.settings, self.name, plan.quantization)
        if plan.dtype == "auto":  # the GPU track: the checkpoint's own dtype, known to vLLM only
            return Weights("auto (the checkpoint's dtype)", None, model)
        if facts is None:  # a Docker track loading MODEL_NAME from the hub
            return Weights(plan.dtype, None, model)
        kind = f"int8 W8A8 + {plan.dtype}" if facts.num_int8_params else plan.dtype
        return Weights(kind, facts.weight_bytes(plan.dtype), model)

    def record(self, pid: int, plan: Plan, argv: list[str], env: dict[str, str], model: str) -> RunRecord:
        """What `up` records of a vLLM this runtime started (`env`: the environment vLLM itself runs with)."""
        return started_record(
            self,
            pid,
            argv,
            env,
            max_model_len=self.settings.max_model_len,
            weights=self.weights(plan, model),
            model_facts=served_model_facts(self.settings, self.name, plan.quantization),
            plan=plan,
        )

    def recap_rows(self, started: Started | None) -> list[tuple[str, str]]:
        rows = self.where_rows()
        plan = started.plan if started is not None else None
        if plan is not None:
            rows += resolved_rows(plan)
            facts = served_model_facts(self.settings, self.name, plan.quantization)
            if facts is not None and plan.dtype != "auto":  # the GPU track's auto: the checkpoint's own
                rows.append(("weights", weights_row(facts, plan.dtype, plan.quantization_reason)))
        report = kv_cache_report(self.log_path.read_text(errors="replace")) if self.log_path.exists() else None
        if report is not None:
            rows.append(
                (
                    "KV cache",
                    f"{report.tokens:,} tokens; max concurrency {report.max_concurrency:g}x "
                    f"at {report.max_model_len:,} tokens per request",
                )
            )
        return rows


def weights_row(facts: ModelFacts, dtype: str, why: str) -> str:
    """Which weights are served, why, and what a decode step reads of them (it reads every one)."""
    size = f"{facts.weight_bytes(dtype) / 1e6:,.0f} MB read per decode step"
    if facts.num_int8_params:
        float_params = facts.num_params - facts.num_int8_params
        return (
            f"int8 W8A8: {facts.num_int8_params / 1e6:.0f}M int8 + {float_params / 1e6:.0f}M {dtype} "
            f"parameters, {size} ({why})"
        )
    return f"{dtype}: {facts.num_params / 1e6:.0f}M parameters, {size} ({why})"


def resolved_rows(resolved: Plan) -> list[tuple[str, str]]:
    """The `auto` settings as vLLM got them, each with its reason."""
    rows = [("dtype", f"{resolved.dtype} ({resolved.dtype_reason})")]
    threads = f"{resolved.omp_threads} ({resolved.omp_threads_reason})"
    if resolved.omp_threads_bind != "auto":  # else the reason above is the binding's
        threads += f", binding {resolved.omp_threads_bind} ({resolved.omp_threads_bind_reason})"
    rows.append(("threads", threads))
    if not resolved.multiprocessing:
        rows.append(
            (
                "processes",
                f"API server and engine core, the model in the engine core ({resolved.multiprocessing_reason})",
            )
        )
    if resolved.max_num_seqs is not None:
        rows.append(("max num seqs", f"{resolved.max_num_seqs} ({resolved.max_num_seqs_reason})"))
    if resolved.block_size is not None:
        rows.append(("block size", f"{resolved.block_size} tokens ({resolved.block_size_reason})"))
    if resolved.kv_cache_space_gib is not None:
        rows.append(("KV budget", f"{resolved.kv_cache_space_gib} GiB ({resolved.kv_cache_space_reason})"))
    if resolved.compile_threads != 1:
        rows.append(("compile", f"{resolved.compile_threads} processes ({resolved.compile_threads_reason})"))
    if resolved.zentorch_reason is not None:
        rows.append(("zentorch", resolved.zentorch_reason))
    wrapper = "C++" if resolved.cpp_wrapper else "Python"
    rows.append(("step wrapper", f"{wrapper} ({resolved.cpp_wrapper_reason})"))
    rows.append(("tool calls", resolved.tool_calls_reason))
    return rows


@dataclass(frozen=True, slots=True)
class DecodeStep:
    """One decode step of an engine as these settings start it natively: every weight is read once
    (`weight_bytes`) for up to `max_sequences` sequences, the inputs of a bandwidth ceiling (benchmarks/roofline.py);
    `facts` are what decided them, for a report."""

    weight_bytes: int
    max_sequences: int
    facts: dict[str, Any]
    plan: Plan | None = None  # the `auto` plan its runtime's start() takes (vLLM); None for an engine without one


Job = Literal["runtimes", "installs", "stops"]


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine ENGINES may name, declared once beside its runtimes (serve/engines/runtimes.py collects them):
    where clients reach it, what it serves, how it is configured, the runtimes `up`, `install` and `down` drive, and
    what a decode step of it reads. The labs and the benchmarks read it too. A new engine is its module declaring one
    of these (its runtime's `start` returning `Started.recorded` with what it started: status and the labs read that
    record), with its installer in serve/install/ if it needs one, its line in ENGINES (serve/engines/runtimes.py),
    its port setting (its line in ENGINE_PORTS, ui/environment.py, its field in serve/config/settings.py and its line
    in .env.example) and its tests."""

    name: str  # its name in ENGINES: "vllm", "llamacpp"
    # the setting it listens on, as these settings start it (that of the runtime serving it: the GPU track's GPU_PORT)
    port_setting: Callable[[Settings], str]
    served_model: Callable[[Settings], str]  # the model name clients ask for
    configured: Callable[[Settings], str]  # what the kit starts it with, as these settings say
    runtimes: Callable[[Settings], list[Runtime]]  # what `up` starts, in order
    # what a step reads and batches (after its install), as the plan its preflight made (None: resolved now) starts it
    decode_step: Callable[[Settings, Plan | None], DecodeStep]
    # what its log says a start compiled (the compile cache loaded, or not); None: it has no compile step
    compile_cache: Callable[[str, Settings], str] | None = None
    installs: Callable[[Settings], list[Runtime]] | None = None  # what `install` readies; None: the runtimes
    stops: Callable[[Settings], list[Runtime]] | None = None  # what `down` stops; None: the runtimes

    def port(self, settings: Settings) -> int:
        return settings.port_of(self.port_setting(settings))

    def base_url(self, settings: Settings) -> str:
        return settings.url_for(self.port(settings))

    def for_job(self, job: Job, settings: Settings) -> list[Runtime]:
        """The runtimes `up` starts ("runtimes"), `install` readies ("installs") or `down` stops ("stops")."""
        return (getattr(self, job) or self.runtimes)(settings)
