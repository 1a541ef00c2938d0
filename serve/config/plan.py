"""The plan: every `auto` setting resolved, once, against the machine and the runtime's limits (`resolve`).

The one resolver for every runtime: natively, in a container (its CPU and memory caps), as a replica (its share of
the CPUs and memory) and on a GPU (KV from GPU memory): each runtime states its limits (RuntimeLimits) and `resolve`
does the rest. The KV budget and the batch that fit the memory left are sizing's arithmetic (sizing.size_batch).

Each value carries the reason it was chosen, so that `up.sh` can show it in its recap; `up` records the plan it
started with (serve/processes/run_record.py), and everything after reads that record instead of resolving again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from serve.config.chat_template import HERMES, KIT_TEMPLATES, ChatTemplate
from serve.config.machine import Machine
from serve.config.model import int8_check, learners_model, served_facts, unknown_to_int8_recipe
from serve.config.settings import VLLM_VERSION, Settings
from serve.config.sizing import (
    AUTO_CPU_BLOCK_SIZE,
    V1_CPU_BLOCK_SIZE,
    VLLM_CPU_OVERHEAD_BYTES,
    BatchSizing,
    GiB,
    ModelFacts,
    auto_seqs,
    auto_seqs_reason,
    size_batch,
)
from ui.values import SettingsError

# Native: the auto KV budget takes at most this share of the RAM available at start (others use the machine).
AUTO_KV_MEMORY_SHARE = 0.5
UNSIZED_KV_GIB = 4  # a model with no local config.json: vLLM's own CPU default (0.9 warns and uses 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The concrete values behind the `auto` settings, with why each was chosen."""

    dtype: str
    dtype_reason: str
    omp_threads: int
    omp_threads_reason: str
    omp_threads_bind: str
    omp_threads_bind_reason: str
    max_num_seqs: int | None  # None: not passed (the GPU track leaves it to vLLM)
    max_num_seqs_reason: str
    block_size: int | None  # None: not passed (vLLM's own default)
    block_size_reason: str
    kv_block_size: int  # the block size vLLM will use: what the KV sizing counts in
    kv_cache_space_gib: int | None  # None: not passed (the GPU track sizes KV by GPU_MEMORY_UTILIZATION)
    kv_cache_space_reason: str
    multiprocessing: bool = True  # False: vLLM's uni executor, the model in the engine core's process
    multiprocessing_reason: str = "vLLM's own: a worker process runs the model"
    compile_threads: int = 1  # processes inductor builds kernels in (serve/engine_plugins/kit_compile_threads.py)
    compile_threads_reason: str = "vLLM's own"
    start_method: str = "spawn"  # how the worker starts (serve/engine_plugins/kit_start_method.py)
    start_method_reason: str = "vLLM's own on CPU"
    zentorch: bool = False  # vLLM runs its linears through AMD's zentorch (serve/install/zentorch.py)
    zentorch_reason: str | None = None  # on an AMD CPU: why the engine runs with or without it
    quantization: str = "none"  # QUANTIZATION as served: "int8" (the kit's W8A8 checkpoint), "none", or the GPU's
    quantization_reason: str = "set in QUANTIZATION"
    # SERVE_WHILE_COMPILING: whether up's start serves an eager engine while the compiled one builds (None: a start
    # that never does, the benchmarks'); decided once the command line is known (resolve_serve_while_compiling)
    serve_eager_first: bool | None = None
    serve_eager_first_reason: str = ""
    cpp_wrapper: bool = False  # inductor's C++ wrapper runs the compiled step (CPP_WRAPPER)
    cpp_wrapper_reason: str = "vLLM's own: inductor's Python wrapper calls the compiled step's ops"
    tool_call_parser: str | None = None  # vLLM's --tool-call-parser (with --enable-auto-tool-choice); None: off
    kit_tool_template: bool = False  # the model's own template composed with the kit's turns for that parser
    tool_calls_reason: str = "vLLM's own: off (a request with tools gets a 400)"


def resolve_dtype(settings: Settings, machine: Machine, unseen_node: bool = False) -> tuple[str, str]:
    if settings.dtype != "auto":
        return settings.dtype, "set in DTYPE"
    if unseen_node:
        return "float32", (
            "auto: float32, which every node's CPU runs (the cluster's CPUs are unknown here); "
            "set DTYPE=bfloat16 for avx512_bf16 nodes"
        )
    if machine.bf16_flag:
        return "bfloat16", f"auto: the CPU has {machine.bf16_flag}"
    return "float32", "auto: the CPU has no BF16 instructions (avx512_bf16/amx_bf16)"


def resolve_threads(settings: Settings, machine: Machine) -> tuple[int, str]:
    """OMP_THREADS: what computes where vLLM does not bind (nobind, llama.cpp)."""
    if settings.omp_threads is not None:
        return settings.omp_threads, "set in OMP_THREADS"
    return machine.usable_cores, f"auto: the {machine.usable_cores} cores this process may use"


def resolve_compile_threads(settings: Settings, machine: Machine) -> tuple[int, str]:
    """COMPILE_THREADS: a start compiles before it serves anything, so every core it may use is free for it."""
    if settings.compile_threads is not None:
        return settings.compile_threads, "set in COMPILE_THREADS"
    return machine.usable_cores, (
        f"auto: the {machine.usable_cores} cores this process may use "
        "(the compiled engine serves nothing while it compiles)"
    )


STARTS_MEASURED = "labs/measured/start-method-avx512-2026-12-04.json"


def resolve_start_method(settings: Settings, container: bool = False) -> tuple[str, str]:
    """START_METHOD: vLLM's CPU platform spawns the worker that runs the model, a fresh interpreter importing torch
    and vLLM again, seconds of CPU before it loads a weight; a fork starts it as a copy of the engine core, which has
    both imported and has run no OpenMP region (what makes the fork safe). The kit's plugin makes vLLM fork it
    natively and binds it as vLLM binds a spawned one (serve/engine_plugins/kit_start_method.py); a container's vLLM
    has no kit plugin."""
    if settings.start_method != "auto":
        return settings.start_method, "set in START_METHOD"
    if container:
        return "spawn", "auto: vLLM's own in a container (the kit's plugin is not there)"
    return "fork", f"auto: the worker starts as a copy of the engine core (measured faster: {STARTS_MEASURED})"


AMD = "AuthenticAMD"
ZENTORCH_AVX2 = "labs/measured/zentorch-avx2-2026-12-03.json"
ZENTORCH_INT8 = "labs/measured/zentorch-int8-avx512-2026-12-06.json"
ZENTORCH_FLOAT = "labs/measured/zentorch-float-avx512-2026-12-06.json"


def zen_with_avx512(machine: Machine) -> bool:
    """The CPUs vLLM 0.32 switches to its ZenCpuPlatform on when zentorch imports (vllm/platforms/__init__.py)."""
    return machine.vendor == AMD and "avx512f" in machine.cpu_flags


def resolve_zentorch(
    settings: Settings, machine: Machine, container: bool = False, int8: bool = False
) -> tuple[bool, str | None]:
    """ZENTORCH: whether the native vLLM gets AMD's zentorch, and why (None: not an AMD CPU, nothing to say);
    `int8`: the served weights are int8 W8A8. SettingsError for `true` where vLLM would not use it.

    auto is what was measured on a Zen 4 with AVX-512, each arm alternating with the other in the same minutes: with
    int8 weights zentorch's linears decoded faster at 1, 4 and 16 users, in every round; with float (bfloat16)
    weights faster at 1 user only."""
    if settings.zentorch is True:
        if container:
            raise SettingsError("ZENTORCH=true is for the native runtime: the Docker images have no zentorch")
        if not zen_with_avx512(machine):
            raise SettingsError(
                f"ZENTORCH=true, but vLLM 0.32 uses zentorch only on an AMD CPU with AVX-512 "
                f"(vllm/platforms/__init__.py); this one is {machine.vendor or 'of an unknown vendor'} with "
                f"{machine.isa}. Set ZENTORCH=auto"
            )
        return True, "set in ZENTORCH: vLLM's linears run through AMD's zentorch (ZenCpuPlatform)"
    if machine.vendor != AMD or container:
        return False, None
    if settings.zentorch is False:
        return False, "set in ZENTORCH: not installed"
    if "avx512f" not in machine.cpu_flags:
        return False, (
            "auto: not installed; vLLM 0.32 uses it only on a Zen CPU with AVX-512 "
            "(vllm/platforms/__init__.py); its linears were faster here for one sequence a step, not for 4 or 16 "
            f"({ZENTORCH_AVX2})"
        )
    if int8:
        return True, (
            "auto: int8 weights on a Zen CPU with AVX-512: vLLM's linears through AMD's zentorch (ZenCpuPlatform) "
            f"decoded faster at 1, 4 and 16 users ({ZENTORCH_INT8})"
        )
    return False, (
        "auto: not installed for float weights: on a Zen CPU with AVX-512 it decoded faster for one user, not for 4 "
        f"({ZENTORCH_FLOAT}); set ZENTORCH=true to have it"
    )


# QUANTIZATION=auto serves int8 natively where the CPU has this flag: there int8 W8A8 decoded faster than the float
# weights at 1 and 16 users for under 1% perplexity; on an AVX2-only CPU it was slower than float32 (oneDNN's AVX2
# int8 path is slower than its float one there), so auto keeps float. Measured: labs/measured/quantization-*.json.
INT8_AUTO_FLAG = "avx512f"
AMX_FLAG = "amx_tile"  # vLLM 0.32 then serves int8 with its AMX kernel (check_cpu_sgl_kernel): bfloat16 only


def resolve_quantization(settings: Settings, machine: Machine, container: bool = False) -> tuple[str, str]:
    """QUANTIZATION as the engine serves it, and why; `container`: a Docker track or a pod (which load MODEL_NAME
    from the hub: the int8 checkpoint is the native runtime's)."""
    if settings.quantization != "auto":
        return settings.quantization, "set in QUANTIZATION"
    if container:
        return "none", "auto: the int8 checkpoint is prepared by the native runtime only"
    if settings.dtype == "float32" and AMX_FLAG in machine.cpu_flags:
        return "none", "auto: the float weights, as DTYPE=float32 asks (the AMX int8 kernel takes bfloat16 only)"
    if INT8_AUTO_FLAG not in machine.cpu_flags:
        return "none", "auto: the float weights on a CPU without AVX-512 (int8 is slower there: labs/quantization.md)"
    if not learners_model(settings):
        return "int8", "auto: int8 W8A8 on a CPU with AVX-512 (faster, +0.9% perplexity: labs/quantization.md)"
    return learners_int8(settings)


INT8_TOLERANCE = 0.01  # the perplexity a learner's model may lose to int8 under QUANTIZATION=auto
INT8_CHECK_PENDING = "auto: the float weights until this model's int8 check has run (its first start runs it)"


def learners_int8(settings: Settings) -> tuple[str, str]:
    """QUANTIZATION=auto for a learner's model on a CPU where int8 is faster: int8 where its own check (perplexity on
    the kit's calibration text, float against int8, serve/install/quantize.py) held within INT8_TOLERANCE."""
    unknown = unknown_to_int8_recipe(settings)
    if unknown is not None:
        return "none", f"auto: the float weights; the kit's int8 recipe does not know {unknown}'s layers"
    check = int8_check(settings)
    if check is None:
        return "none", INT8_CHECK_PENDING
    measured = (
        f"perplexity on the kit's calibration text {check['change']:+.2%} as int8 ({check['float_perplexity']:.3f} "
        f"-> {check['int8_perplexity']:.3f})"
    )
    if abs(check["change"]) <= INT8_TOLERANCE:
        return "int8", f"auto: int8 W8A8 on a CPU with AVX-512, {measured}, within {INT8_TOLERANCE:.0%}"
    return "none", (
        f"auto: the float weights: {measured}, beyond {INT8_TOLERANCE:.0%}; QUANTIZATION=int8 serves it anyway"
    )


def int8_check_due(settings: Settings, machine: Machine) -> bool:
    """Whether a start must first make a learner's int8 checkpoint and its check, for QUANTIZATION=auto to decide."""
    return resolve_quantization(settings, machine) == ("none", INT8_CHECK_PENDING)


def resolve_multiprocessing(settings: Settings, machine: Machine, container: bool = False) -> tuple[bool, str]:
    """VLLM_ENABLE_V1_MULTIPROCESSING as vLLM gets it. False keeps vLLM's uni executor on CPU: the model runs in
    the engine core's process, no worker process, no hand-over queue between them, and no core left to a poller.
    Faster than vLLM's worker process on AVX2, a tie or worse on AVX-512 (measured: labs/throughput.md)."""
    if settings.v1_multiprocessing is not None:
        return settings.v1_multiprocessing, "set in VLLM_ENABLE_V1_MULTIPROCESSING"
    if container:
        return True, "auto: vLLM's own in a container (a worker process runs the model)"
    if machine.isa == "AVX2" and machine.usable_cores > 1:
        return False, (
            "auto: on a CPU with AVX2 and no AVX-512 the model runs in the engine core's process, on every core "
            "(measured faster there: labs/throughput.md)"
        )
    return True, f"auto: vLLM's own on {machine.isa}: a worker process runs the model"


def resolve_binding(
    settings: Settings, machine: Machine, container: bool = False, multiprocessing: bool = True
) -> tuple[str, str]:
    """VLLM_CPU_OMP_THREADS_BIND as vLLM gets it. vLLM's `auto` binds one OpenMP thread per physical core
    and reserves one core: its scheduler process polls busily for the worker (labs/throughput.md)."""
    if settings.omp_threads_bind != "auto":
        return settings.omp_threads_bind, "set in VLLM_CPU_OMP_THREADS_BIND"
    if not multiprocessing:
        return "nobind", "auto: nobind, vLLM binds only the worker processes it starts and the uni executor has none"
    if container:
        return "nobind", (
            "auto: nobind in a container (CPU_LIMIT caps CPU time, not CPUs: vLLM's binding "
            "would spread over every host core)"
        )
    if machine.cores < 2:
        return "nobind", "auto: nobind, a single core leaves none to reserve"
    return "auto", (
        f"auto: vLLM's own, {machine.cores - 1} of {machine.cores} cores compute, one is left to "
        "its scheduler and API server"
    )


def resolve_block_size(settings: Settings, engine_block_size: int) -> tuple[int | None, str]:
    """BLOCK_SIZE as passed to vLLM (None: not passed). `engine_block_size` is the engine's own default."""
    if settings.block_size is not None:
        return settings.block_size, "set in BLOCK_SIZE"
    if engine_block_size == V1_CPU_BLOCK_SIZE:
        return AUTO_CPU_BLOCK_SIZE, (
            f"auto: {AUTO_CPU_BLOCK_SIZE} on vLLM's CPU backend, faster than its "
            f"default {V1_CPU_BLOCK_SIZE} at 16 users"
        )
    return None, f"auto: vLLM's own ({engine_block_size})"


CPP_WRAPPER_MEASURED = "labs/measured/cpp-wrapper-default-avx512-2026-12-07.json"
CPP_WRAPPER_AVX2 = "labs/measured/cpp-wrapper-avx2-stand-in-2026-12-07.json"
# vLLM's own switches that decide the compiled step's ops (VLLM_EXTRA_ARGS setting one of them wins over CPP_WRAPPER):
# --compilation-config JSON, -cc JSON, -O3, -O.level=3, -O 3
COMPILATION_FLAGS = ("--compilation-config", "-cc")


def sets_compilation(arg: str) -> bool:
    name = arg.split("=", 1)[0]
    return name in COMPILATION_FLAGS or (name.startswith("-O") and not name.startswith("--"))


CPP_WRAPPER_SINCE = (0, 32)  # the oldest vLLM measured with it: its VLLM_USE_LAYERNAME=0 passes layer names as str


def resolve_cpp_wrapper(settings: Settings, machine: Machine, limits: RuntimeLimits) -> tuple[bool, str]:
    """CPP_WRAPPER: whether inductor writes the compiled step's wrapper in C++ rather than Python.

    The Python wrapper calls each of the step's ops from the interpreter, one at a time; the C++ one calls them
    from compiled code. vLLM 0.32 passes its attention ops the layer's name as an opaque LayerName object, which
    the C++ wrapper cannot pass (NotImplementedError: arg type PyObject is not yet supported by custom_op_wrapper);
    vLLM's own VLLM_USE_LAYERNAME=0 passes it as a str, which it can (serve/config/vllm_flags.py sets both)."""
    if settings.enforce_eager:
        return False, "ENFORCE_EAGER=true: nothing is compiled"
    if any(sets_compilation(arg) for arg in settings.extra_args):
        return False, "VLLM_EXTRA_ARGS sets vLLM's compilation config itself"
    if settings.cpp_wrapper is False:
        return False, "set in CPP_WRAPPER: inductor's Python wrapper calls the compiled step's ops"
    if limits.container or limits.gpu or limits.version < CPP_WRAPPER_SINCE:
        if settings.cpp_wrapper:
            raise SettingsError(
                "CPP_WRAPPER=true is for the native CPU engine (vLLM "
                f"{'.'.join(map(str, CPP_WRAPPER_SINCE))}+), where it was measured; set CPP_WRAPPER=auto"
            )
        return False, "auto: vLLM's own (the Python wrapper) in a container, where it was not measured"
    if settings.cpp_wrapper:
        return True, "set in CPP_WRAPPER: inductor's C++ wrapper calls the compiled step's ops, no Python between them"
    if "avx512f" not in machine.cpu_flags:
        return False, (
            "auto: inductor's Python wrapper on a CPU without AVX-512, where the C++ one decoded at a tie and compiled "
            f"longer ({CPP_WRAPPER_AVX2})"
        )
    return True, (
        "auto: inductor's C++ wrapper calls the compiled step's ops, no Python between them "
        f"(faster at 1, 4 and 16 users on AVX-512: {CPP_WRAPPER_MEASURED})"
    )


# vLLM 0.9.1's hermes parser refuses a tokenizer without <tool_call> in its vocabulary (checked in its wheel);
# 0.32's reads the tags as text
HERMES_TEXT_TAGS_IN = (0, 32)
TOOL_FLAGS = ("--tool-call-parser", "--chat-template")  # set in VLLM_EXTRA_ARGS, those win: the kit sets neither


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """How vLLM serves tool calls: its parser (None: off), whether the kit's turns teach the model that parser's
    format, and why."""

    parser: str | None
    kit_template: bool
    reason: str


def resolve_tool_calls(settings: Settings, template: ChatTemplate | None, vllm_version: tuple[int, int]) -> ToolCalls:
    """TOOL_CALL_PARSER. `template`: the served model's own (None: not readable here, a Docker track's hub model).

    auto is the format the model's own template teaches, else Hermes (<tool_call>{json}</tool_call>, what ChatML
    models are trained on), taught by the kit's turns where the model's template is ChatML without a tool format.
    A named function and tool_choice=required work whatever the model was taught: vLLM constrains their arguments
    to the schema; tool_choice=auto needs the model to write the parser's format by itself."""
    given = {arg.split("=", 1)[0] for arg in settings.extra_args} & set(TOOL_FLAGS)
    if "--tool-call-parser" in given:
        return ToolCalls(None, False, "set in VLLM_EXTRA_ARGS")
    if settings.tool_call_parser == "none":
        return ToolCalls(None, False, "set in TOOL_CALL_PARSER: off (a request with tools gets a 400)")
    own_format = template.tool_format if template is not None else None
    parser = settings.tool_call_parser if settings.tool_call_parser != "auto" else own_format or HERMES
    how = "set in TOOL_CALL_PARSER" if settings.tool_call_parser != "auto" else "auto"
    model = settings.model_name
    if parser == HERMES and own_format is None and template is not None and vllm_version < HERMES_TEXT_TAGS_IN:
        version = ".".join(map(str, vllm_version))
        return ToolCalls(
            None,
            False,
            f"{how}: off; vLLM {version}'s hermes parser needs <tool_call> in the model's vocabulary, which "
            f"{model}'s lacks (a request with tools gets an error; RUNTIME=native serves them)",
        )
    if own_format == parser:
        return ToolCalls(parser, False, f"{how}: {parser}, the tool-call format {model}'s own template teaches")
    teachable = template is not None and template.chatml and parser in KIT_TEMPLATES and "--chat-template" not in given
    if teachable:
        return ToolCalls(
            parser,
            True,
            f"{how}: {parser}; {model}'s own template teaches no tool-call format, so a conversation with tools gets "
            f"the kit's {parser} turns ({KIT_TEMPLATES[parser].name}), every other its own template",
        )
    why = "not readable here" if template is None else "teaching no format vLLM's parser reads"
    return ToolCalls(
        parser,
        False,
        f"{how}: {parser}, with {model}'s own template ({why}): a named function and tool_choice=required work "
        "(vLLM constrains the arguments); with auto the model answers text unless it writes that format",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeLimits:
    """What the engine may use where it runs: the resolver's input beside the settings, the CPU and the model.
    Each runtime states its own: natively `native_limits`, a container's caps (serve/engines/tracks.py), a replica's
    share (serve/engines/replicas.py), a GPU (whose KV pool is GPU memory's, sized by vLLM)."""

    cores: int  # cores it may compute on
    memory_bytes: int | None  # what weights + KV + runtime may take; None: GPU memory (GPU_MEMORY_UTILIZATION's)
    engine_block_size: int  # the engine's own default KV block size (vLLM V1 on CPU: 128, V0: 16, GPU: 16)
    cpus: tuple[int, ...] = ()  # CPUs of its own to bind its threads to (a replica's share); () for none
    container: bool = False  # CPU_LIMIT caps CPU time, not CPUs: vLLM's binding would spread over the host's
    gpu: bool = False
    where: str = ""  # how the reasons name these limits: "CPU_LIMIT=2", "replica 1 of 2"
    unseen_node: bool = False  # a pod: its node's CPU is unknown here (serve/kube/spec.py)
    vllm_version: tuple[int, int] | None = None  # the engine's vLLM (the CPU image's); None: the kit's VLLM_VERSION

    @property
    def version(self) -> tuple[int, int]:
        major, minor = VLLM_VERSION.split(".")[:2]
        return self.vllm_version or (int(major), int(minor))


def native_limits(machine: Machine) -> RuntimeLimits:
    """A native engine alone on this machine: its cores, a share of the memory available now (AUTO_KV_MEMORY_SHARE:
    the rest is for everything else the machine runs)."""
    return RuntimeLimits(
        cores=machine.usable_cores,
        memory_bytes=int(machine.memory_available_bytes * AUTO_KV_MEMORY_SHARE),
        engine_block_size=V1_CPU_BLOCK_SIZE,
    )


def gpu_plan(settings: Settings, machine: Machine, limits: RuntimeLimits, template: ChatTemplate | None = None) -> Plan:
    """On a GPU, DTYPE=auto stays auto (the checkpoint's), MAX_NUM_SEQS=auto is left to vLLM, and the KV pool is what
    GPU_MEMORY_UTILIZATION leaves (vLLM sizes it); the CPU threads only serve the API."""
    blocks, blocks_reason = resolve_block_size(settings, limits.engine_block_size)
    quantization, quantization_reason = resolve_quantization(settings, machine, limits.container)
    tools = resolve_tool_calls(settings, template, limits.version)
    cpp_wrapper, cpp_wrapper_reason = resolve_cpp_wrapper(settings, machine, limits)
    return Plan(
        dtype=settings.dtype,
        dtype_reason="set in DTYPE" if settings.dtype != "auto" else "auto: vLLM on GPU uses the checkpoint's dtype",
        omp_threads=1,
        omp_threads_reason="GPU: CPU threads only serve the API",
        omp_threads_bind=settings.omp_threads_bind,
        omp_threads_bind_reason="GPU: not used",
        max_num_seqs=settings.max_num_seqs,
        max_num_seqs_reason="set in MAX_NUM_SEQS" if settings.max_num_seqs else "auto: vLLM's own default on GPU",
        block_size=blocks,
        block_size_reason=blocks_reason,
        kv_block_size=blocks or limits.engine_block_size,
        kv_cache_space_gib=None,
        kv_cache_space_reason=f"GPU: GPU_MEMORY_UTILIZATION={settings.gpu_memory_utilization:g} sizes the KV pool",
        quantization=quantization,
        quantization_reason=quantization_reason,
        cpp_wrapper=cpp_wrapper,
        cpp_wrapper_reason=cpp_wrapper_reason,
        tool_call_parser=tools.parser,
        kit_tool_template=tools.kit_template,
        tool_calls_reason=tools.reason,
    )


@dataclass(frozen=True, slots=True)
class CpuUse:
    """How a CPU engine uses its cores: the OpenMP binding and threads, and whether a worker process runs the model."""

    omp_threads_bind: str
    omp_threads_bind_reason: str
    omp_threads: int
    omp_threads_reason: str
    multiprocessing: bool
    multiprocessing_reason: str


def resolve_own_cpus(settings: Settings, limits: RuntimeLimits) -> CpuUse | None:
    """An engine with CPUs of its own (a replica's share): bound to them, one OpenMP thread each, in a worker process
    (vLLM binds a worker only: the uni executor would spread over every CPU); None when it has none, or when
    VLLM_CPU_OMP_THREADS_BIND is set (then that is what it gets)."""
    if not limits.cpus or settings.omp_threads_bind != "auto":
        return None
    return CpuUse(
        cpu_list(limits.cpus),
        f"{limits.where}: its own CPUs",
        len(limits.cpus),
        f"{limits.where}: one per CPU it binds",
        True,
        f"{limits.where}: a worker process, for vLLM's binding",
    )


def resolve_cpu_use(settings: Settings, machine: Machine, seen: Machine, limits: RuntimeLimits) -> CpuUse:
    """The binding, threads and executor for the cores the engine sees (`seen`: `machine` within `limits`)."""
    own = resolve_own_cpus(settings, limits)
    if own is not None:
        return own
    multiprocessing, multiprocessing_reason = resolve_multiprocessing(settings, seen, limits.container)
    bind, bind_reason = resolve_binding(settings, seen, limits.container, multiprocessing)
    threads, threads_reason = resolve_thread_count(settings, seen, bind, bind_reason, multiprocessing)
    if limits.unseen_node and settings.omp_threads is None:
        left = ", one core left to the scheduler and API server" if threads < seen.usable_cores else ""
        threads_reason = f"auto: {limits.where}{left}"
    elif limits.container and settings.omp_threads is None:
        capped = f"auto: the host's {machine.usable_cores} cores, capped by {limits.where}"
        cores = seen.usable_cores
        threads_reason = capped + (f": {cores}, one left to the scheduler and API server" if threads < cores else "")
    return CpuUse(bind, bind_reason, threads, threads_reason, multiprocessing, multiprocessing_reason)


def resolve_batch(
    settings: Settings, facts: ModelFacts | None, limits: RuntimeLimits, dtype: str, cores: int, kv_block_size: int
) -> BatchSizing:
    """MAX_NUM_SEQS and the KV budget: sized in the memory the weights leave, or, the model or memory unknown, as set
    or the unsized defaults."""
    if facts is None or limits.memory_bytes is None:
        return BatchSizing(
            settings.max_num_seqs or auto_seqs(cores),
            "set in MAX_NUM_SEQS" if settings.max_num_seqs else auto_seqs_reason(cores),
            settings.kv_cache_space_gib or UNSIZED_KV_GIB,
            "set in VLLM_CPU_KVCACHE_SPACE"
            if settings.kv_cache_space_gib
            else f"auto: no local config.json for {settings.model_name} to size from, so vLLM's CPU default",
        )
    room = limits.memory_bytes - facts.weight_bytes(dtype) - VLLM_CPU_OVERHEAD_BYTES
    return size_batch(
        facts,
        dtype,
        settings.max_model_len,
        cores,
        room,
        settings.max_num_seqs,
        settings.kv_cache_space_gib,
        kv_block_size,
    )


def cpu_list(cpus: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> '0-2,5': the form VLLM_CPU_OMP_THREADS_BIND takes."""
    parts: list[str] = []
    start = previous = cpus[0]
    for cpu in (*cpus[1:], None):
        if cpu is not None and cpu == previous + 1:
            previous = cpu
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if cpu is not None:
            start = previous = cpu
    return ",".join(parts)


def resolve(
    settings: Settings,
    machine: Machine,
    facts: ModelFacts | None,
    limits: RuntimeLimits | None = None,
    template: ChatTemplate | None = None,
) -> Plan:
    """The one resolver: every `auto` against this machine's CPU and the runtime's `limits` (default: a native engine
    alone here, `native_limits`). `facts` is the model's float checkpoint (None: unknown, KV not sized); the KV is
    sized for the weights QUANTIZATION serves; `template` is its own chat template (None: not readable here)."""
    limits = limits or native_limits(machine)
    if limits.gpu:
        return gpu_plan(settings, machine, limits, template)
    # the machine as the engine sees it: its cores (a container's cap, a replica's share), the same CPU
    cores = max(1, min(machine.usable_cores, limits.cores))
    seen = dataclasses.replace(machine, usable_cores=cores, physical_cores=min(machine.cores, cores))
    quantization, quantization_reason = resolve_quantization(settings, machine, limits.container)
    facts = served_facts(settings, facts, quantization)
    dtype, dtype_reason = resolve_dtype(settings, seen, limits.unseen_node)
    blocks, blocks_reason = resolve_block_size(settings, limits.engine_block_size)
    kv_block_size = blocks or limits.engine_block_size
    cpu = resolve_cpu_use(settings, machine, seen, limits)
    batch = resolve_batch(settings, facts, limits, dtype, cores, kv_block_size)
    compile_threads, compile_threads_reason = resolve_compile_threads(settings, seen)
    start_method, start_method_reason = resolve_start_method(settings, limits.container)
    int8 = facts is not None and facts.num_int8_params > 0
    zentorch, zentorch_reason = resolve_zentorch(settings, machine, limits.container, int8)
    tools = resolve_tool_calls(settings, template, limits.version)
    cpp_wrapper, cpp_wrapper_reason = resolve_cpp_wrapper(settings, seen, limits)
    return Plan(
        dtype=dtype,
        dtype_reason=dtype_reason,
        omp_threads=cpu.omp_threads,
        omp_threads_reason=cpu.omp_threads_reason,
        omp_threads_bind=cpu.omp_threads_bind,
        omp_threads_bind_reason=cpu.omp_threads_bind_reason,
        max_num_seqs=batch.max_num_seqs,
        max_num_seqs_reason=batch.max_num_seqs_reason,
        block_size=blocks,
        block_size_reason=blocks_reason,
        kv_block_size=kv_block_size,
        kv_cache_space_gib=batch.kv_space_gib,
        kv_cache_space_reason=batch.kv_space_reason,
        multiprocessing=cpu.multiprocessing,
        multiprocessing_reason=cpu.multiprocessing_reason,
        compile_threads=compile_threads,
        compile_threads_reason=compile_threads_reason,
        start_method=start_method,
        start_method_reason=start_method_reason,
        zentorch=zentorch,
        zentorch_reason=zentorch_reason,
        quantization=quantization,
        quantization_reason=quantization_reason,
        cpp_wrapper=cpp_wrapper,
        cpp_wrapper_reason=cpp_wrapper_reason,
        tool_call_parser=tools.parser,
        kit_tool_template=tools.kit_template,
        tool_calls_reason=tools.reason,
    )


@dataclass(frozen=True, slots=True)
class ServingEarly:
    """SERVE_WHILE_COMPILING resolved: whether an eager engine answers while the compiled one builds, and why."""

    serve_eager_first: bool
    reason: str  # in words, for the recap and the start's line


def resolve_serve_while_compiling(
    setting: bool | None, *, eager: bool, replica: bool, compiled_before: bool, engine_bytes: int, whole: Machine
) -> ServingEarly:
    """Whether up's native start serves an eager engine while the compiled one builds (SERVE_WHILE_COMPILING,
    serve/engines/hand_over.py), recorded in its plan. The one `auto` that waits for the command line: whether these
    exact flags compiled on this machine before (`compiled_before`) is known only once the plan made them."""
    if setting is False:
        return ServingEarly(False, "SERVE_WHILE_COMPILING=false")
    if eager:
        return ServingEarly(False, "ENFORCE_EAGER=true: this engine compiles nothing")
    if replica:
        return ServingEarly(False, "a replica: its router sends requests to the replicas that answer")
    if setting is None and compiled_before:
        return ServingEarly(
            False, "these settings compiled on this machine before: this start loads the compiled model"
        )
    needed = 2 * engine_bytes
    if needed > whole.memory_available_bytes:
        return ServingEarly(
            False,
            f"two engines need {needed / GiB:.1f} GiB (weights + KV budget + runtime ~"
            f"{VLLM_CPU_OVERHEAD_BYTES / GiB:.1f} GiB each) and {whole.memory_available_bytes / GiB:.1f} GiB is "
            "available: the compiled engine starts alone",
        )
    why = "SERVE_WHILE_COMPILING=true" if setting else "these settings never started compiled on this machine"
    return ServingEarly(True, f"{why}: an eager engine answers while the compiled one builds, then hands the port over")


def resolve_thread_count(
    settings: Settings, machine: Machine, bind: str, bind_reason: str, multiprocessing: bool
) -> tuple[int, str]:
    """OMP_NUM_THREADS as vLLM gets it, for the binding and executor already resolved."""
    if bind == "auto":  # vLLM sets OMP_NUM_THREADS itself: one per core it binds
        return machine.cores - 1, f"binding {bind_reason}"
    if not multiprocessing and settings.omp_threads is None:
        threads = machine.usable_cores
        return threads, f"auto: all {threads} cores this process may use: no worker process to wait on"
    if bind == "nobind" and settings.omp_threads is None and machine.usable_cores > 1:
        threads = machine.usable_cores - 1
        return threads, (
            f"auto: {threads} of the {machine.usable_cores} cores this process may use, one left to the "
            "scheduler and API server, as vLLM's own binding leaves"
        )
    return resolve_threads(settings, machine)
