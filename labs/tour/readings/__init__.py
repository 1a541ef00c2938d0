"""What a section's numbers say: its headline, its tables and two or three sentences, generated from the data.

Pure functions of a section's recorded data (labs/tour/sections.py), so a tour recorded on one machine reads
the same on any other, and every sentence is about numbers measured, never pasted in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from labs.tour.plan import Section
from labs.tour.readings.course import read_batching, read_paging, read_seed
from labs.tour.readings.serving import read_contract, read_load, read_quantization
from labs.tour.readings.shapes import Reading, Table

__all__ = ["Reading", "Table", "read"]

READERS: dict[Section, Callable[[dict[str, Any]], Reading]] = {
    Section.SEED: read_seed,
    Section.PAGING: read_paging,
    Section.BATCHING: read_batching,
    Section.LOAD: read_load,
    Section.CONTRACT: read_contract,
}


def read(section: Section, data: dict[str, Any], isa_flags: Sequence[str] = ()) -> Reading:
    if section is Section.QUANTIZATION:
        return read_quantization(data, isa_flags)
    return READERS[section](data)
