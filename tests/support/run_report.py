"""Where a run of `bash tests/run.sh` spent its time: its phases, the install's slowest steps and the slowest tests,
against the suite's budget (35 minutes on a bare machine). tests/run.sh calls it last, whatever the run's outcome.

    python -m tests.support.run_report PHASES.tsv INSTALL.log JUNIT.xml

PHASES.tsv: one "name<TAB>seconds" line per phase, in order (tests/run.sh writes it); "name<TAB>seconds<TAB>beside"
for a phase that ran beside the others (shown, not added to the total). INSTALL.log: what
`python -m serve install` printed; its "✓ step (N s)" lines are the steps. JUNIT.xml: pytest's --junitxml, whose
testcase times are each test's call (setup and teardown included: pytest adds them to the testcase).
Any of the three may be missing (a run stopped early): the report says so and goes on.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from labs.results import MachineFacts

BUDGET_S = 35 * 60  # issue 52: the whole run, on a bare machine
SHOWN = 10
STEP = re.compile(r"^✓ (?P<what>.+) \((?P<seconds>\d+) s\)$")


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def phases(path: Path) -> list[tuple[str, float, bool]]:
    """(name, seconds, ran beside the others) per phase."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, seconds, *flags = line.split("\t")
        if name and seconds:
            rows.append((name, float(seconds), flags == ["beside"]))
    return rows


def install_steps(path: Path) -> list[tuple[str, float]]:
    if not path.exists():
        return []
    found = [STEP.match(line.strip()) for line in path.read_text(errors="replace").splitlines()]
    return sorted(((m["what"], float(m["seconds"])) for m in found if m), key=lambda row: -row[1])


def slowest_tests(path: Path) -> list[tuple[str, float]]:
    if not path.exists():
        return []
    cases = ET.parse(path).getroot().iter("testcase")
    rows = [(f"{case.get('classname', '')}::{case.get('name', '')}", float(case.get("time", 0))) for case in cases]
    return sorted(rows, key=lambda row: -row[1])


def table(title: str, rows: list[tuple[str, float]], missing: str) -> list[str]:
    lines = [title]
    if not rows:
        return [*lines, f"  ({missing})"]
    width = min(max(len(name) for name, _ in rows), 110)
    return [*lines, *(f"  {seconds:7.0f} s  {name[:width]}" for name, seconds in rows)]


def report(phases_path: Path, install_log: Path, junit: Path) -> str:
    ran = phases(phases_path)
    total = sum(seconds for _, seconds, beside in ran if not beside)
    verdict = (
        f"within the {BUDGET_S // 60} min budget"
        if total <= BUDGET_S
        else f"OVER the {BUDGET_S // 60} min budget by {minutes(total - BUDGET_S)}"
    )
    tests = slowest_tests(junit)
    lines = [f"Where the time went: {minutes(total)} in all, {verdict} (the budget is for a bare machine)"]
    lines.append(f"  machine: {MachineFacts.detect().describe()}")  # an AVX2 run is not an AVX-512 one
    shown = [(f"{name} (not in the total: it ran beside the others)" if beside else name, s) for name, s, beside in ran]
    lines += table("  phases:", shown, "none recorded")
    lines += table(f"  the install's {SHOWN} slowest steps:", install_steps(install_log)[:SHOWN], "no install log")
    lines += table(
        f"  the {SHOWN} slowest of {len(tests)} tests (setup and teardown included):", tests[:SHOWN], "no pytest report"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m tests.support.run_report PHASES.tsv INSTALL.log JUNIT.xml", file=sys.stderr)
        return 2
    print(report(*(Path(arg) for arg in argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
