"""Each section of the tour in one place: its title, the lab it runs and that lab's page, the course's figure beside
it, how much it asks of its lab in the full tour and in `--quick`, the seconds it takes, how it measures, how its
numbers read and how they are drawn. The tour (`__main__`) and its report read this table.

Adding a section: its member of `Section` in labs/tour/outline.py (the course's order) and one `Part` here naming its
sizes and measure (labs/tour/sections.py), its reading (labs/tour/readings/) and its plot (labs/tour/plots.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from matplotlib.figure import Figure

from labs.tour import plots, sections
from labs.tour.outline import Section, Seed
from labs.tour.readings.course import read_batching, read_paging, read_seed
from labs.tour.readings.serving import read_contract, read_load, read_quantization
from labs.tour.readings.shapes import Reading
from labs.tour.sections import ContractSizes, LoadSizes, QuantizationSizes, SeedSizes, StudySizes

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
    seed: Seed | None  # the course's own figure, shown beside this machine's (a reading may name a closer one)
    sizes: tuple[Any, Any]  # full, quick: what its measure asks of its lab (one of sections' *Sizes)
    estimate_s: tuple[float, float]  # full, quick: seconds on the kit's 2-core machine, the first guess of time left
    measure: Callable[[sections.Context, Any], Data]  # the context holds the data of the sections measured before it
    read: Read
    draw: Callable[[Data, Figure], None]
    plot_height: float = 1.0  # times the report's usual plot height

    def run(self, ctx: sections.Context, quick: bool) -> Data:
        return self.measure(ctx, self.sizes[quick])

    def reading(self, data: Data, isa_flags: Sequence[str]) -> Reading:
        """What the numbers say, beside the course's figure where the reading names none of its own."""
        found = self.read(data, isa_flags)
        return found if found.seed is not None else replace(found, seed=self.seed)


PARTS: dict[Section, Part] = {
    part.section: part
    for part in (
        Part(
            Section.SEED,
            "1. The seed experiment: one request at a time, then all at once, vLLM vs the Ollama-class engine",
            "labs.compare",
            "labs/compare.md",
            Seed("3.13x vs 1.10x", "matched sequential / concurrent wall time, vLLM vs Ollama"),
            (SeedSizes(n=8, max_tokens=48), SeedSizes(n=4, max_tokens=24)),
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
            Seed("waste < 4%", "KV slots paged but not filled (the PagedAttention paper; the seed: 3.6x)"),
            (
                # the seed's figures: 5.1x and 21x TTFT p50 at max batch 16 and 32 (4 and 8 add minutes on two cores)
                StudySizes(requests=48, rate=25.0, batches=(16, 32), short_tokens=24, long_tokens=150),
                StudySizes(requests=16, rate=25.0, batches=(16,), short_tokens=12, long_tokens=48),
            ),
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
            Seed("5.1x TTFT p50", "static / continuous TTFT p50 at max batch 16"),
            (None, None),  # the paging section's study measured it
            (1, 1),
            sections.batching,
            data_only(read_batching),
            plots.batching,
        ),
        Part(
            Section.LOAD,
            "4. Load: Poisson arrivals over a rate sweep, and what /metrics and the doctor saw",
            "labs.loadtest + labs.doctor",
            "labs/loadtest.md, labs/metrics.md",
            None,
            (
                # 32/s fills the kit's 32 sequences on two cores: requests wait in the engine
                LoadSizes(rates=(2, 8, 32), requests=48, lengths="mix:24@0.8,150@0.2"),
                LoadSizes(rates=(2, 16), requests=16, lengths="fixed:24"),
            ),
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
            None,  # the page's own measurement for this machine's ISA (readings.serving)
            (
                QuantizationSizes(windows=24, users=(1, 16), requests=16, lengths="fixed:64"),
                QuantizationSizes(windows=2, users=(1, 8), requests=8, lengths="fixed:32"),
            ),
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
            None,
            (
                ContractSizes(checks=None),  # every check
                ContractSizes(
                    checks=(
                        "models",
                        "chat",
                        "chat_stream",
                        "include_usage",
                        "completions",
                        "finish_length",
                        "stop_string",
                        "error_unknown_model",
                    )
                ),
            ),
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
