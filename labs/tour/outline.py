"""What the tour runs, in the course's order: the sections, and the figures a section is read beside.

A section is one experiment of the course; everything about it (its title, lab, the course's figure, how much it
asks in the full tour and in `--quick`, its measure, reading and plot) is in its one entry of
labs/tour/catalogue.py.
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
