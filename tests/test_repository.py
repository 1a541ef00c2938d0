"""The repository is self-contained: a user's clone has nothing next to it, so no file may read from there."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT

SHARED, WORKPLACE = (
    "../" + "shared",
    "/" + "work/",
)  # the workplace's folders next to this clone (split: not a hit here)
OUTSIDE = re.compile(rf"(?<![\w.])({re.escape(SHARED)}\b|{re.escape(WORKPLACE)})")


def test_no_tracked_file_reads_outside_the_repository() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    offenders = [
        f"{name}:{number}: {line.strip()}"
        for name in files
        if (ROOT / name).is_file() and not name.startswith("tests/data/")
        for number, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not offenders, "files that reach outside the clone:\n" + "\n".join(offenders)


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_of_the_guide_and_its_pages_resolves() -> None:
    """The README sends a reader to the pages the details live on: none of those links may lead nowhere."""
    pages = [ROOT / "README.md", *ROOT.glob("*/README.md"), *ROOT.glob("serve/*/README.md"), *ROOT.glob("labs/*.md")]
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in LINK.findall(page.read_text())
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert not broken, "links to nothing:\n" + "\n".join(broken)
