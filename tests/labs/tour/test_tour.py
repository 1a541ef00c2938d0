"""The README's and labs/tour.md's `python -m labs.tour --quick`, run as written against the real kit (the harness's
vLLM and llama.cpp servers), and its report opened in headless Chromium: every section rendered, with its plot."""

from __future__ import annotations

import re
import shlex
import shutil
import time
from pathlib import Path

import pytest

from benchmarks.first_token import TOUR_ENGINES, kit_steps, tour_parts
from labs import results
from labs.tour.__main__ import parse_args
from labs.tour.catalogue import PARTS
from labs.tour.outline import Section
from labs.tour.report import TOUR_JSON
from tests.conftest import ROOT, Server
from tests.support.docs import doc_commands, retarget, run_doc
from tests.support.loadtest_browser import CHROMIUM, check_page

pytestmark = pytest.mark.slow
QUICK = ".venv/bin/python -m labs.tour --quick"
FULL = ".venv/bin/python -m labs.tour"
QUICK_TIMEOUT_S = 1500  # a few minutes alone, on a machine the suite keeps busy
WROTE = re.compile(r"^wrote (\S+/index\.html) \((\d+) s\)", re.M)


def test_the_documented_commands_are_the_quick_and_the_full_tour() -> None:
    for page in ("README.md", "labs/tour.md"):
        tour = [command for command in doc_commands(page) if "-m labs.tour" in command]
        assert tour == [QUICK, FULL], (page, tour)
    assert parse_args(shlex.split(QUICK)[3:]).quick and not parse_args(shlex.split(FULL)[3:]).quick


def test_the_quick_tour_on_the_real_kit_writes_every_section_with_its_plot(
    vllm_server: Server, llamacpp_server: Server
) -> None:
    if not CHROMIUM.exists():
        pytest.skip("chromium is not installed (tests/system-packages.sh installs it)")
    # the second vLLM the quantization section starts (the other weights) runs eager: on a bare machine its compile
    # would take a cold compile ("cold-compile" in labs/quantities.py) of the suite's budget, and what the test checks
    # (every section rendered, the kit's steps timed) is the
    # same without it; benchmarks.first_token --tour times a first tour with that compile
    env = {**vllm_server.env, "LLAMACPP_PORT": str(llamacpp_server.port), "ENFORCE_EAGER": "true"}
    launched_s = time.monotonic()
    result = run_doc(retarget(QUICK, {8009: vllm_server.port}), env, timeout_s=QUICK_TIMEOUT_S)
    command_s = time.monotonic() - launched_s
    wrote = WROTE.search(result.stdout)
    folder = ROOT / Path(wrote.group(1)).parent if wrote else None
    try:
        assert result.returncode == 0 and folder is not None, f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
        assert "tour 1/8" in result.stdout and "min left" in result.stdout  # progress with time left
        assert "starting a second vLLM with QUANTIZATION=" in result.stdout  # said before it starts one
        _, payload = results.load(folder / TOUR_JSON)
        assert [(item["section"], item["status"]) for item in payload["sections"]] == [
            (section.value, "ok") for section in Section
        ], [item["error"] for item in payload["sections"]]
        page = check_page(folder / "index.html")
        assert not page.errors, page.errors
        assert [(shown["id"], shown["heading"]) for shown in page.sections] == [
            (section.value, PARTS[section].title) for section in Section
        ]
        for shown in page.sections:
            assert len(shown["images"]) == 1, shown
            assert all(image["complete"] and image["width"] > 0 for image in shown["images"]), shown
        assert "This machine:" in page.text and "the seed: 3.13x vs 1.10x" in page.text
        # benchmarks.first_token --tour reads a tour's parts from its tour.json against the command's own time: the
        # tour's seconds fit inside it, and what its sections leave is the engines' start and stop
        parts = tour_parts(folder, command_s)
        assert list(parts) == ["total", TOUR_ENGINES, *(section.value for section in Section)], parts
        assert payload["seconds"] <= command_s and parts[TOUR_ENGINES] > 0, (payload["seconds"], parts)
        assert all(parts[section.value] > 0 for section in Section), parts
        # ... and the kit's steps from its output: here the second vLLM's start
        steps = kit_steps([(0.0, line) for line in result.stdout.splitlines()])
        assert any(title.startswith("Starting vLLM") and seconds > 0 for title, seconds in steps), steps
    finally:
        if folder is not None and folder.is_relative_to(ROOT / "results"):
            shutil.rmtree(folder, ignore_errors=True)
