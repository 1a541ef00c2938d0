"""What the tour runs, in the course's order: the sections, the seed's figures, and how big each run is.

A section is one experiment of the course; `Sizes` says how much each lab is asked to do, in the full tour and
in `--quick` (fewer requests, the same sections). Everything else about a section (its title, lab, measure,
reading and plot) is in its one entry of labs/tour/catalogue.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from labs.figures import MEASURED, resolve
from labs.results import load


class Section(StrEnum):
    """The course's experiments, in its order; the value is the section's id in the report."""

    SEED = "seed"
    PAGING = "paging"
    BATCHING = "batching"
    LOAD = "load"
    QUANTIZATION = "quantization"
    CONTRACT = "contract"


@dataclass(frozen=True, slots=True)
class Seed:
    """The course's own figure for a section (measured on the seed's machine), shown beside this machine's."""

    figure: str
    what: str
    source: str = "the seed"  # whose figure: the course's seed study, or the lab page's own measurement


SEEDS = {
    Section.SEED: Seed("3.13x vs 1.10x", "matched sequential / concurrent wall time, vLLM vs Ollama"),
    Section.PAGING: Seed("waste < 4%", "KV slots paged but not filled (the PagedAttention paper; the seed: 3.6x)"),
    Section.BATCHING: Seed("5.1x TTFT p50", "static / continuous TTFT p50 at max batch 16"),
}
# The quantization lab's own measurement per ISA (the results files labs/quantization.md cites): int8 W8A8 over the
# float weights' output tok/s at 1 and 16 users, and the perplexity it cost
QUANTIZATION_MEASURED = {
    "avx512f": ("quantization-speed-avx512-2026-12-02.json", "quantization-quality-avx512-2026-12-02.json", "AVX-512"),
    "avx2": ("quantization-speed-avx2-2026-12-02.json", "quantization-quality-avx2-2026-12-02.json", "AVX2 only"),
}


def quantization_measured(isa_key: str) -> Seed:
    """The quantization page's figure for this ISA, read from the results files that measured it."""
    speed_file, quality_file, isa = QUANTIZATION_MEASURED[isa_key]
    speed = load(MEASURED / speed_file)[1]["arm_over_float"]["int8"]
    cost = resolve(load(MEASURED / quality_file)[1], "/engines/name=int8/perplexity_vs_float")
    return Seed(
        f"{speed['1']:.2f}x / {speed['16']:.2f}x, {cost:+.2%}",
        f"int8 / float tok/s at 1 / 16 users, perplexity ({isa})",
        f"labs/measured/{speed_file}",
    )


SEED_MAX_LEN_OVER_PAGED = 3.6  # the seed study's max_len reservation over paged slots at max batch 16
SEED_BATCH = 16  # the max batch the seed's TTFT figure is for


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much each lab is asked to do; every field goes to one lab's command line."""

    compare_n: int
    compare_max_tokens: int
    engine_requests: int
    engine_rate: float
    engine_batches: str
    engine_short_tokens: int
    engine_long_tokens: int
    load_rates: str
    load_requests: int
    load_lengths: str
    quality_windows: int  # perplexity windows of 1,000 tokens (the text has 24)
    speed_users: str
    speed_requests: int
    speed_lengths: str
    contract_checks: str | None  # None: every check


FULL = Sizes(
    compare_n=8,
    compare_max_tokens=48,
    engine_requests=48,
    engine_rate=25.0,
    engine_batches="16,32",  # the seed's figures: 5.1x and 21x TTFT p50 (4 and 8 add minutes on two cores)
    engine_short_tokens=24,
    engine_long_tokens=150,
    load_rates="2,8,32",  # 32/s fills the kit's 32 sequences on two cores: requests wait in the engine
    load_requests=48,
    load_lengths="mix:24@0.8,150@0.2",
    quality_windows=24,
    speed_users="1,16",
    speed_requests=16,
    speed_lengths="fixed:64",
    contract_checks=None,
)
QUICK = Sizes(
    compare_n=4,
    compare_max_tokens=24,
    engine_requests=16,
    engine_rate=25.0,
    engine_batches="16",
    engine_short_tokens=12,
    engine_long_tokens=48,
    load_rates="2,16",
    load_requests=16,
    load_lengths="fixed:24",
    quality_windows=2,
    speed_users="1,8",
    speed_requests=8,
    speed_lengths="fixed:32",
    contract_checks="models,chat,chat_stream,include_usage,completions,finish_length,stop_string,error_unknown_model",
)
