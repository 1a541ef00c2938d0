"""Each section of the tour in one place: its title, the lab it runs and that lab's page, the seconds it takes, how
it measures, how its numbers read and how they are drawn. The tour (`__main__`) and its report read this table.

Adding a section: its member of `Section` in labs/tour/plan.py (the course's order), the fields its lab needs in
`Sizes` with their full and quick values, a course figure to show beside it in plan.SEEDS if it has one, and one
`Part` here naming its measure (labs/tour/sections.py), its reading (labs/tour/readings/) and its plot
(labs/tour/plots.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from labs.tour import plots, sections
from labs.tour.plan import Section
from labs.tour.readings.course import read_batching, read_paging, read_seed
from labs.tour.readings.serving import read_contract, read_load, read_quantization
from labs.tour.readings.shapes import Reading

Data = dict[str, Any]
Read = Callable[[Data, Sequence[str]], Reading]  # a section's data and the machine's ISA flags -> what they say


def data_only(read: Callable[[Data], Reading]) -> Read:
    """A reading that needs no more than the section's data (all but quantization's, which the ISA changes)."""
    return lambda data, _isa_flags: read(data)


@dataclass(frozen=True, slots=True)
class Part:
    section: Section
    title: str
    lab: str  # the lab modules it runs
    page: str  # their pages
    estimate_s: tuple[float, float]  # full, quick: seconds on the kit's 2-core machine, the first guess of time left
    measure: Callable[[sections.Context], Data]  # the context holds the data of the sections measured before it
    read: Read
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
            sections.seed,
            data_only(read_seed),
            plots.seed,
        ),
        Part(
            Section.PAGING,
            "2. Paging: KV cache reserved vs used, a max_len slab per request vs blocks on demand",
            "labs.sizing + labs.engine.experiment",
            "labs/sizing.md, labs/engine.md",
            (150, 30),
            sections.paging,
            data_only(read_paging),
            plots.paging,
        ),
        Part(
            Section.BATCHING,
            "3. Batching: static vs continuous, TTFT and throughput",
            "labs.engine.experiment",
            "labs/engine.md",
            (1, 1),  # the paging section's study measured it
            sections.batching,
            data_only(read_batching),
            plots.batching,
        ),
        Part(
            Section.LOAD,
            "4. Load: Poisson arrivals over a rate sweep, and what /metrics and the doctor saw",
            "labs.loadtest + labs.doctor",
            "labs/loadtest.md, labs/metrics.md",
            (90, 15),
            sections.load,
            data_only(read_load),
            plots.load,
        ),
        Part(
            Section.QUANTIZATION,
            "5. Quantization: float vs int8 weights, bytes per step, tok/s, perplexity",
            "labs.quantization + labs.loadtest",
            "labs/quantization.md",
            (300, 200),  # most of it the second vLLM's start
            sections.quantization,
            read_quantization,
            plots.quantization,
        ),
        Part(
            Section.CONTRACT,
            "6. The contract: the OpenAI /v1 checks on every engine the tour ran",
            "labs.contract",
            "labs/contract.md",
            (60, 15),
            sections.contract,
            data_only(read_contract),
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
