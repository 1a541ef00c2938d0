"""LEARN: the tour, the course's experiments in one run and one report (`python -m labs.tour`, labs/tour.md).

plan (the sections, sizes, the seed's figures) -> catalogue (each section in one entry: title, lab, estimate, and
the three functions below) -> engines (the kit's up.sh / down.sh) -> sections (each runs its labs through their own
entry points and keeps what their results files say) -> readings (headline, tables and sentences generated from the
numbers) and plots -> report (index.html, tour.json in the results envelope).
"""
