"""What a section's numbers say: its headline, its tables and two or three sentences, generated from the data.

Pure functions of a section's recorded data (labs/tour/sections.py), so a tour recorded on one machine reads
the same on any other, and every sentence is about numbers measured, never pasted in.
"""

from __future__ import annotations

from labs.tour.readings.shapes import Reading, Table

__all__ = ["Reading", "Table"]
