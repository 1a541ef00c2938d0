"""The memory-bandwidth ceiling for decode: every decode step reads all the weights once.

    ceiling output tok/s = sequences decoded per step x (bandwidth / weight bytes)

A 135M-parameter model in bfloat16 is 270 MB of weights; at ~19 GB/s a step cannot take less than ~14 ms,
so one stream cannot beat ~70 tok/s however good the kernels are. Batching B sequences reads the weights
once for all B, which is how vLLM multiplies throughput while llama.cpp's server (one request at a time)
cannot. KV-cache reads and compute are left out: the ceiling is an upper bound, not a prediction.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

BANDWIDTH_BUFFER_BYTES = 256 << 20  # well above any CPU cache, small enough to share a 24 GiB machine
BANDWIDTH_REPEATS = 5  # best of N: the machine's capability, not its noise
GB = 1e9


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """numpy copy bandwidth: bytes read plus bytes written per second, `threads` slices at once, best run."""

    copy_bytes_per_s: float
    buffer_bytes: int
    threads: int
    repeats: int
    method: str = "numpy.copyto on one slice per thread (numpy releases the GIL), read+write bytes / s, best run"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_bandwidth(
    threads: int, buffer_bytes: int = BANDWIDTH_BUFFER_BYTES, repeats: int = BANDWIDTH_REPEATS
) -> Bandwidth:
    """As many copying threads as the engines compute with: one core alone cannot saturate the memory bus."""
    source = np.ones(buffer_bytes // 8, dtype=np.float64)
    target = np.empty_like(source)
    slices = [slice(part[0], part[-1] + 1) for part in np.array_split(np.arange(source.size), threads)]

    def copy(part: slice) -> None:
        np.copyto(target[part], source[part])

    best_s = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(copy, slices))  # touch every page before timing
        for _ in range(repeats):
            started = time.perf_counter()
            list(pool.map(copy, slices))
            best_s = min(best_s, time.perf_counter() - started)
    return Bandwidth(2 * source.nbytes / best_s, source.nbytes, threads, repeats)


@dataclass(frozen=True, slots=True)
class Ceiling:
    """Where one measurement stands against the bandwidth limit."""

    weight_bytes: int
    sequences_per_step: int  # the batch a decode step carries at this concurrency
    ceiling_output_tokens_per_s: float
    fraction_of_ceiling: float  # measured / ceiling

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ceiling(
    weight_bytes: int, sequences_per_step: int, bandwidth: Bandwidth, measured_output_tokens_per_s: float
) -> Ceiling:
    if weight_bytes <= 0 or sequences_per_step <= 0:
        raise ValueError(f"weight_bytes={weight_bytes}, sequences_per_step={sequences_per_step}: both must be > 0")
    limit = sequences_per_step * bandwidth.copy_bytes_per_s / weight_bytes
    return Ceiling(weight_bytes, sequences_per_step, limit, measured_output_tokens_per_s / limit)
