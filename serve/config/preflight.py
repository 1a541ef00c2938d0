"""Preflight: refuse a configuration that cannot start, or would crash-loop, before any runtime starts.

It judges the values vLLM will get: every `auto` resolved (serve/config/plan.resolve). A fractional
VLLM_CPU_KVCACHE_SPACE never gets here: the settings refuse it (vLLM reads it with int() and dies at start).

Refusals (up.sh exits 2 with one line naming the variable and a value that works):
- MAX_MODEL_LEN beyond the model's context (max_position_embeddings);
- one MAX_MODEL_LEN sequence that does not fit the KV pool;
- weights + KV budget + runtime overhead beyond MEMORY_LIMIT (docker) or the available RAM (native):
  the crash loop of a too-large model under a container cap.
- QUANTIZATION that the runtime's kernels cannot serve: awq/gptq/fp8 on the CPU tracks, int8 on the GPU track or
  in the Docker CPU track (its container loads MODEL_NAME from the hub), int8 with DTYPE=float32 on a CPU
  with AMX (vLLM's AMX int8 kernel takes 16-bit activations only).
Warnings: MAX_NUM_SEQS sequences of MAX_MODEL_LEN tokens exceed the pool (admission then queues on KV).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from serve.config.machine import Machine, detect
from serve.config.model import served_model_facts
from serve.config.plan import AMX_FLAG, Plan
from serve.config.settings import BUNDLED_MODEL_NAME, CPU_QUANTIZATIONS, Settings
from serve.config.sizing import (
    V0_BLOCK_SIZE,
    V1_CPU_BLOCK_SIZE,
    VLLM_CPU_OVERHEAD_BYTES,
    GiB,
    KvPool,
    ModelFacts,
    kv_pool,
    kv_space_gib_for_tokens,
)
from ui.values import SettingsError

CONTAINER_RUNTIMES = ("docker",)  # capped by MEMORY_LIMIT
GPU_RUNTIMES = ("docker-gpu",)  # KV pool set by GPU memory utilization, not VLLM_CPU_KVCACHE_SPACE
V1_ON_CPU_SINCE = (0, 10)  # the CPU image's vLLM before this runs V0, with 16-token blocks


def block_size_for(settings: Settings, runtime: str) -> int:
    """V0's 16-token blocks in a CPU image older than 0.10 (CPU_IMAGE_TAG), else V1's 128 on CPU."""
    if runtime in CONTAINER_RUNTIMES and settings.cpu_image_vllm_version < V1_ON_CPU_SINCE:
        return V0_BLOCK_SIZE
    return V1_CPU_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class Finding:
    variable: str
    message: str


@dataclass(slots=True)
class Verdict:
    """What the preflight found: refusals (the first one stops the start), warnings, and notes on what it could not
    check. It prints nothing: the caller shows `lines()`."""

    refusals: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The warnings and notes as the console shows them (rich markup)."""
        return [f"[yellow]warning:[/yellow] {warning.message}" for warning in self.warnings] + self.notes

    def refuse(self, variable: str, message: str) -> None:
        self.refusals.append(Finding(variable, message))

    def warn(self, variable: str, message: str) -> None:
        self.warnings.append(Finding(variable, message))


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:.2f} GiB"


def kv_setting(settings: Settings, resolved: Plan) -> str:
    """How a message names the KV budget: as set, or `auto` with what it resolved to."""
    if settings.kv_cache_space_gib is not None:
        return f"VLLM_CPU_KVCACHE_SPACE={settings.kv_cache_space_gib}"
    return f"VLLM_CPU_KVCACHE_SPACE=auto ({resolved.kv_cache_space_gib} GiB)"


def check(
    settings: Settings,
    resolved: Plan,
    facts: ModelFacts | None,
    runtime: str,
    memory_available_bytes: int,
    overhead_bytes: int = VLLM_CPU_OVERHEAD_BYTES,
) -> Verdict:
    """Every refusal and warning for these settings as resolved; pure (the caller measures the machine)."""
    verdict = Verdict()
    if facts is None:
        return verdict
    dtype, kv_gib = resolved.dtype, resolved.kv_cache_space_gib
    sized = runtime not in GPU_RUNTIMES  # the GPU's KV pool is GPU_MEMORY_UTILIZATION's
    pool = kv_pool(facts, dtype, kv_gib * GiB, resolved.kv_block_size) if sized and kv_gib is not None else None
    context = facts.max_position_embeddings
    if context is not None and settings.max_model_len > context:
        longest = min(context, pool.num_tokens) if pool else context
        verdict.refuse(
            "MAX_MODEL_LEN",
            f"MAX_MODEL_LEN={settings.max_model_len} is too long: {facts.name} has a context of "
            f"{context} tokens (max_position_embeddings); set MAX_MODEL_LEN={longest} or less",
        )
        return verdict
    if pool is None:
        return verdict
    if not pool.fits_one_sequence(settings.max_model_len):
        needed = kv_space_gib_for_tokens(facts, dtype, settings.max_model_len, pool.block_size)
        verdict.refuse(
            "VLLM_CPU_KVCACHE_SPACE",
            f"{kv_setting(settings, resolved)} is too small: its pool holds {pool.num_tokens:,} "
            f"tokens of {facts.name} in {dtype}, and one MAX_MODEL_LEN={settings.max_model_len} "
            f"sequence needs {pool.blocks_per_sequence(settings.max_model_len)} blocks of "
            f"{pool.block_size}; set VLLM_CPU_KVCACHE_SPACE={needed} or MAX_MODEL_LEN="
            f"{pool.num_tokens if pool.num_tokens else 'smaller'}",
        )
        return verdict
    _check_memory(verdict, settings, resolved, facts, runtime, memory_available_bytes, overhead_bytes)
    if not verdict.refusals:
        _check_admission(verdict, settings, resolved, facts, pool)
    return verdict


def _check_memory(
    verdict: Verdict,
    settings: Settings,
    resolved: Plan,
    facts: ModelFacts,
    runtime: str,
    memory_available_bytes: int,
    overhead_bytes: int,
) -> None:
    dtype, budget = resolved.dtype, (resolved.kv_cache_space_gib or 0) * GiB
    weights = facts.weight_bytes(dtype)
    needed = weights + budget + overhead_bytes
    if runtime in CONTAINER_RUNTIMES:
        cap = settings.memory_limit.num_bytes
        variable, problem = "MEMORY_LIMIT", f"MEMORY_LIMIT={settings.memory_limit} is too small: it"
        outcome = "the container would be OOM-killed and restarted in a loop"
    else:
        cap, variable = memory_available_bytes, "VLLM_CPU_KVCACHE_SPACE"
        problem = f"{kv_setting(settings, resolved)} is too large for this machine: the available RAM ({_gib(cap)})"
        outcome = "vLLM would refuse the KV allocation or be OOM-killed at start"
    if needed <= cap:
        return
    spend = (
        f"weights {_gib(weights)} ({facts.name}, {dtype}) + KV {_gib(budget)} "
        f"(VLLM_CPU_KVCACHE_SPACE) + runtime ~{_gib(overhead_bytes)} = {_gib(needed)}"
    )
    fixes = []
    room_gib = (cap - weights - overhead_bytes) // GiB
    if room_gib >= 1 and kv_pool(facts, dtype, room_gib * GiB, resolved.kv_block_size).fits_one_sequence(
        settings.max_model_len
    ):
        fixes.append(f"set VLLM_CPU_KVCACHE_SPACE={room_gib}")
    if runtime in CONTAINER_RUNTIMES:
        fixes.append(f"set MEMORY_LIMIT={math.ceil(needed / GiB)}g")
    elif weights + overhead_bytes > cap and settings.model_name != BUNDLED_MODEL_NAME:  # the learner's model itself
        variable = "MODEL_PATH" if settings.model_path is not None else "MODEL_NAME"
        problem = f"{facts.name} does not fit this machine: the available RAM ({_gib(cap)})"
        outcome = "no KV budget makes room for it"
        fixes += ["serve a smaller model (labs/your-model.md sizes one before you download it)", "free memory"]
    else:
        fixes.append("free memory")
    advice = " or ".join(fixes)
    verdict.refuse(variable, f"{problem} cannot hold {spend}; {outcome}. {advice[0].upper()}{advice[1:]}")


def _check_admission(verdict: Verdict, settings: Settings, resolved: Plan, facts: ModelFacts, pool: KvPool) -> None:
    seqs = resolved.max_num_seqs or 0
    wanted_blocks = seqs * pool.blocks_per_sequence(settings.max_model_len)
    if wanted_blocks <= pool.num_blocks:
        return
    full_tokens = seqs * settings.max_model_len
    needed_gib = kv_space_gib_for_tokens(facts, resolved.dtype, wanted_blocks * pool.block_size, pool.block_size)
    verdict.warn(
        "MAX_NUM_SEQS",
        f"MAX_NUM_SEQS={seqs} x MAX_MODEL_LEN={settings.max_model_len} = "
        f"{full_tokens:,} tokens exceeds the KV pool ({pool.num_tokens:,} tokens): when sequences "
        f"run long, admission queues on KV space (waiting rises while KV usage nears 100%). For "
        f"full-length room for every sequence set MAX_NUM_SEQS="
        f"{pool.max_num_seqs(settings.max_model_len)} or VLLM_CPU_KVCACHE_SPACE={needed_gib}",
    )


def quantization_problem(
    settings: Settings, quantization: str, dtype: str, runtime: str, machine: Machine
) -> str | None:
    """Why QUANTIZATION (resolved: `quantization`) cannot be served by this runtime with this dtype on this CPU, with
    the fix; None if it can."""
    wanted = f"QUANTIZATION={settings.quantization}"
    if runtime in GPU_RUNTIMES:
        if quantization == "int8":
            return (
                f"{wanted} is the CPU track's int8 W8A8 checkpoint, prepared natively; on the GPU track set "
                "QUANTIZATION=fp8 (Hopper/Ada), or awq/gptq with such a checkpoint in MODEL_NAME, or none"
            )
        return None
    if quantization not in CPU_QUANTIZATIONS:
        return (
            f"{wanted} is the GPU track's (RUNTIME=docker-gpu): vLLM's CPU kernels do not serve it; on the CPU "
            "set QUANTIZATION=int8 (int8 W8A8 weights prepared from the float model) or none"
        )
    if quantization != "int8":
        return None
    if runtime in CONTAINER_RUNTIMES:
        return (
            f"{wanted} is prepared by the native runtime from the bundled model, and the Docker CPU track loads "
            "MODEL_NAME from the hub in its container: use RUNTIME=native, or set QUANTIZATION=none with "
            "MODEL_NAME naming a compressed-tensors W8A8 checkpoint (vLLM reads its quantization from its config)"
        )
    if dtype == "float32" and AMX_FLAG in machine.cpu_flags:
        return (
            f"{wanted} with DTYPE=float32 cannot run on this CPU: it has AMX, and vLLM's AMX int8 kernel takes "
            "bfloat16 activations only; set DTYPE=bfloat16 (or auto), or QUANTIZATION=none for the float weights"
        )
    return None


def run(settings: Settings, resolved: Plan, runtime: str) -> Verdict:
    """Check before starting: raise SettingsError (exit 2) on the first refusal; else the verdict, whose warnings and
    notes the caller shows."""
    problem = quantization_problem(settings, resolved.quantization, resolved.dtype, runtime, detect())
    if problem is not None:
        raise SettingsError(problem)
    facts = served_model_facts(settings, runtime, resolved.quantization)
    verdict = check(settings, resolved, facts, runtime, detect().memory_available_bytes)
    if verdict.refusals:
        raise SettingsError(verdict.refusals[0].message)
    if facts is None:
        verdict.notes.append(f"preflight: no local config for MODEL_NAME={settings.model_name}; KV sizing not checked")
    return verdict
