"""Each section of the tour in one place: its title, the lab it runs and that lab's page, the seconds it takes, how
it measures, how its numbers read and how they are drawn. The tour (`__main__`) and its report read this table.

Adding a section: its member of `Section` in labs/tour/plan.py (the course's order), the fields its lab needs in
`Sizes` with their full and quick values, a course figure to show beside it in plan.SEEDS if it has one, and one
`Part` here naming its measure (labs/tour/sections.py), its reading (labs/tour/readings/) and its plot
(labs/tour/plots.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from labs.tour import plots, sections
from labs.tour.plan import Section
from labs.tour.readings.course import read_batching, read_paging, read_seed
from labs.tour.readings.serving import read_contract, read_load, read_quantization
from labs.tour.readings.shapes import Reading

Data = dict[str, Any]
# a section's measure gets the tour's context and the data of the sections measured before it
Measure = Callable[[sections.Context, Mapping[Section, Data]], Data]


@dataclass(frozen=True, slots=True)
class Part:
    section: Section
    title: str
    lab: str  # the lab modules it runs
    page: str  # their pages
    estimate_s: tuple[float, float]  # full, quick: seconds on the kit's 2-core machine, the first guess of time left
    measure: Measure
    read: Callable[[Data, Sequence[str]], Reading]  # its data and the machine's ISA flags -> what they say
    draw: Callable[[Data, Figure], None]
    plot_height: float = 1.0  # times the report's usual plot height


PARTS: dict[Section, Part] = {
    part.section: part
    for part in (
        Part(
            Section.SEED,
            "1. The seed experiment: one request at a time, then all at once, vLLM vs the Ollama-class engine",
            "labs.compare",
            "labs/compare.md",
            (40, 15),
            lambda ctx, _done: sections.seed(ctx),
            lambda data, _isa: read_seed(data),
            plots.seed,
        ),
        Part(
            Section.PAGING,
            "2. Paging: KV cache reserved vs used, a max_len slab per request vs blocks on demand",
            "labs.sizing + labs.engine.experiment",
            "labs/sizing.md, labs/engine.md",
            (150, 30),
            lambda ctx, _done: sections.paging(ctx),
            lambda data, _isa: read_paging(data),
            plots.paging,
        ),
        Part(
            Section.BATCHING,
            "3. Batching: static vs continuous, TTFT and throughput",
            "labs.engine.experiment",
            "labs/engine.md",
            (1, 1),  # the paging section's study measured it
            lambda ctx, done: sections.batching(ctx, done.get(Section.PAGING) or None),
            lambda data, _isa: read_batching(data),
            plots.batching,
        ),
        Part(
            Section.LOAD,
            "4. Load: Poisson arrivals over a rate sweep, and what /metrics and the doctor saw",
            "labs.loadtest + labs.doctor",
            "labs/loadtest.md, labs/metrics.md",
            (90, 15),
            lambda ctx, _done: sections.load(ctx),
            lambda data, _isa: read_load(data),
            plots.load,
        ),
        Part(
            Section.QUANTIZATION,
            "5. Quantization: float vs int8 weights, bytes per step, tok/s, perplexity",
            "labs.quantization + labs.loadtest",
            "labs/quantization.md",
            (300, 200),  # most of it the second vLLM's start
            lambda ctx, _done: sections.quantization(ctx),
            read_quantization,
            plots.quantization,
        ),
        Part(
            Section.CONTRACT,
            "6. The contract: the OpenAI /v1 checks on every engine the tour ran",
            "labs.contract",
            "labs/contract.md",
            (60, 15),
            lambda ctx, _done: sections.contract(ctx),
            lambda data, _isa: read_contract(data),
            plots.contract,
            plot_height=1.3,
        ),
    )
}
assert list(PARTS) == list(Section), "one Part per Section, in the course's order"

# the tour's steps around the sections: the engines' check (both already up; starting them is a minute more) and
# stopping what it started
STEP_ESTIMATES_S = {"engines": (5.0, 5.0), "stop": (5.0, 5.0)}


def estimate_s(step: str, quick: bool) -> float:
    """The first guess of a step's seconds: a section's id or one of STEP_ESTIMATES_S."""
    full, short = PARTS[Section(step)].estimate_s if step in PARTS else STEP_ESTIMATES_S[step]
    return float(short if quick else full)
