"""Preflight: refuse a configuration that cannot start, or would crash-loop, before any runtime starts.

Refusals (up.sh exits 2 with one line naming the variable and a value that works):
- VLLM_CPU_KVCACHE_SPACE that is not a whole number (vLLM reads it with int() and dies at start);
- MAX_MODEL_LEN beyond the model's context (max_position_embeddings);
- one MAX_MODEL_LEN sequence that does not fit the KV pool;
- weights + KV budget + runtime overhead beyond MEMORY_LIMIT (docker) or the available RAM (native):
  the crash loop of a too-large model under a container cap.
Warnings: MAX_NUM_SEQS sequences of MAX_MODEL_LEN tokens exceed the pool (admission then queues on KV).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from serve.machine import detect
from serve.native import MODEL_DIR
from serve.progress import console
from serve.settings import ROOT, Settings, SettingsError
from serve.sizing import (V0_BLOCK_SIZE, V1_CPU_BLOCK_SIZE, GiB, VLLM_CPU_OVERHEAD_BYTES, KvPool, ModelFacts, SizingError, kv_pool,
                          kv_space_gib_for_tokens, load_model_facts, model_facts, parse_memory_size)
from serve.vllm_command import parse_version, resolve

BUNDLED_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
BUNDLED_MODEL_CONFIG = ROOT / "serve" / "bundled-model-config.json"  # a copy of the prepared config.json
CONTAINER_RUNTIMES = ("docker",)  # capped by MEMORY_LIMIT
GPU_RUNTIMES = ("docker-gpu",)  # KV pool set by GPU memory utilization, not VLLM_CPU_KVCACHE_SPACE
V1_ON_CPU_SINCE = (0, 10)  # the CPU image's vLLM before this runs V0, with 16-token blocks


def block_size_for(settings: Settings, runtime: str) -> int:
    """V0's 16-token blocks in a CPU image older than 0.10 (CPU_IMAGE_TAG), else V1's 128 on CPU."""
    if runtime in CONTAINER_RUNTIMES:
        if parse_version(settings.cpu_image_tag.removeprefix("v").split("-")[0]) < V1_ON_CPU_SINCE:
            return V0_BLOCK_SIZE
    return V1_CPU_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class Finding:
    variable: str
    message: str


@dataclass(slots=True)
class Verdict:
    refusals: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    def refuse(self, variable: str, message: str) -> None:
        self.refusals.append(Finding(variable, message))

    def warn(self, variable: str, message: str) -> None:
        self.warnings.append(Finding(variable, message))


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:.2f} GiB"


def check(settings: Settings, facts: ModelFacts | None, dtype: str, runtime: str,
          memory_available_bytes: int, overhead_bytes: int = VLLM_CPU_OVERHEAD_BYTES,
          block_size: int = V1_CPU_BLOCK_SIZE) -> Verdict:
    """Every refusal and warning for these settings; pure (the caller measures the machine)."""
    verdict = Verdict()
    kv_gib = settings.kv_cache_space_gib
    if not float(kv_gib).is_integer():
        verdict.refuse("VLLM_CPU_KVCACHE_SPACE",
                       f"VLLM_CPU_KVCACHE_SPACE={kv_gib:g} is invalid: vLLM reads it as whole GiB (int()) and "
                       f"would die at start; set VLLM_CPU_KVCACHE_SPACE="
                       f"{' or '.join(str(gib) for gib in sorted({max(1, math.floor(kv_gib)), math.ceil(kv_gib)}))}")
        return verdict
    if facts is None:
        return verdict
    budget = int(kv_gib) * GiB
    pool = kv_pool(facts, dtype, budget, block_size)
    context = facts.max_position_embeddings
    if context is not None and settings.max_model_len > context:
        longest = context if runtime in GPU_RUNTIMES else min(context, pool.num_tokens)
        verdict.refuse("MAX_MODEL_LEN",
                       f"MAX_MODEL_LEN={settings.max_model_len} is too long: {facts.name} has a context of "
                       f"{context} tokens (max_position_embeddings); set MAX_MODEL_LEN={longest} or less")
        return verdict
    if runtime in GPU_RUNTIMES:
        return verdict
    if not pool.fits_one_sequence(settings.max_model_len):
        needed = kv_space_gib_for_tokens(facts, dtype, settings.max_model_len, pool.block_size)
        verdict.refuse("VLLM_CPU_KVCACHE_SPACE",
                       f"VLLM_CPU_KVCACHE_SPACE={kv_gib:g} is too small: its pool holds {pool.num_tokens:,} "
                       f"tokens of {facts.name} in {dtype}, and one MAX_MODEL_LEN={settings.max_model_len} "
                       f"sequence needs {pool.blocks_per_sequence(settings.max_model_len)} blocks of "
                       f"{pool.block_size}; set VLLM_CPU_KVCACHE_SPACE={needed} or MAX_MODEL_LEN="
                       f"{pool.num_tokens if pool.num_tokens else 'smaller'}")
        return verdict
    _check_memory(verdict, settings, facts, dtype, runtime, budget, memory_available_bytes, overhead_bytes,
                  block_size)
    if not verdict.refusals:
        _check_admission(verdict, settings, facts, dtype, pool)
    return verdict


def _check_memory(verdict: Verdict, settings: Settings, facts: ModelFacts, dtype: str, runtime: str,
                  budget: int, memory_available_bytes: int, overhead_bytes: int, block_size: int) -> None:
    weights = facts.weight_bytes(dtype)
    needed = weights + budget + overhead_bytes
    if runtime in CONTAINER_RUNTIMES:
        try:
            cap = parse_memory_size(settings.memory_limit)
        except SizingError as exc:
            verdict.refuse("MEMORY_LIMIT", f"MEMORY_LIMIT={settings.memory_limit!r} is invalid: {exc}")
            return
        variable, problem = "MEMORY_LIMIT", f"MEMORY_LIMIT={settings.memory_limit} is too small: it"
        outcome = "the container would be OOM-killed and restarted in a loop"
    else:
        cap, variable = memory_available_bytes, "VLLM_CPU_KVCACHE_SPACE"
        problem = (f"VLLM_CPU_KVCACHE_SPACE={budget // GiB} is too large for this machine: the available "
                   f"RAM ({_gib(cap)})")
        outcome = "vLLM would refuse the KV allocation or be OOM-killed at start"
    if needed <= cap:
        return
    spend = (f"weights {_gib(weights)} ({facts.name}, {dtype}) + KV {_gib(budget)} "
             f"(VLLM_CPU_KVCACHE_SPACE) + runtime ~{_gib(overhead_bytes)} = {_gib(needed)}")
    fixes = []
    room_gib = (cap - weights - overhead_bytes) // GiB
    if room_gib >= 1 and kv_pool(facts, dtype, room_gib * GiB, block_size).fits_one_sequence(settings.max_model_len):
        fixes.append(f"set VLLM_CPU_KVCACHE_SPACE={room_gib}")
    if runtime in CONTAINER_RUNTIMES:
        fixes.append(f"set MEMORY_LIMIT={math.ceil(needed / GiB)}g")
    else:
        fixes.append("free memory")
    advice = " or ".join(fixes)
    verdict.refuse(variable, f"{problem} cannot hold {spend}; {outcome}. {advice[0].upper()}{advice[1:]}")


def _check_admission(verdict: Verdict, settings: Settings, facts: ModelFacts, dtype: str, pool: KvPool) -> None:
    wanted_blocks = settings.max_num_seqs * pool.blocks_per_sequence(settings.max_model_len)
    if wanted_blocks <= pool.num_blocks:
        return
    full_tokens = settings.max_num_seqs * settings.max_model_len
    needed_gib = kv_space_gib_for_tokens(facts, dtype, wanted_blocks * pool.block_size, pool.block_size)
    verdict.warn("MAX_NUM_SEQS",
                 f"MAX_NUM_SEQS={settings.max_num_seqs} x MAX_MODEL_LEN={settings.max_model_len} = "
                 f"{full_tokens:,} tokens exceeds the KV pool ({pool.num_tokens:,} tokens): when sequences "
                 f"run long, admission queues on KV space (waiting rises while KV usage nears 100%). For "
                 f"full-length room for every sequence set MAX_NUM_SEQS="
                 f"{pool.max_num_seqs(settings.max_model_len)} or VLLM_CPU_KVCACHE_SPACE={needed_gib}")


def served_model_facts(settings: Settings, runtime: str) -> ModelFacts | None:
    """The native runtime serves the bundled model (its prepared config, or the copy in serve/ before
    the first install); a Docker track serves MODEL_NAME from the hub, known here only if it is that model."""
    if runtime not in ("native", "auto") and settings.model_name != BUNDLED_MODEL_NAME:
        return None
    return bundled_model_facts()


def bundled_model_facts() -> ModelFacts:
    """The kit's model: its prepared checkpoint (exact parameter count from safetensors) or the config copy."""
    if (MODEL_DIR / "config.json").exists():
        return load_model_facts(MODEL_DIR)
    return model_facts(json.loads(BUNDLED_MODEL_CONFIG.read_text()), MODEL_DIR.name)


def run(settings: Settings, runtime: str) -> Verdict:
    """Check before starting: print warnings, raise SettingsError (exit 2) on the first refusal."""
    machine = detect()
    dtype = resolve(settings, machine).dtype
    facts = served_model_facts(settings, runtime)
    verdict = check(settings, facts, dtype, runtime, machine.memory_available_bytes,
                    block_size=block_size_for(settings, runtime))
    if verdict.refusals:
        raise SettingsError(verdict.refusals[0].message)
    for warning in verdict.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning.message}")
    if facts is None:
        console.print(f"preflight: no local config for MODEL_NAME={settings.model_name}; KV sizing not checked")
    return verdict
