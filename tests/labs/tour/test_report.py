"""The tour's report from recorded sections (tests/labs/tour/recorded.py: the labs' own results files, read back by
the tour's collectors): every section's plot, table and sentences, each sentence reading the numbers recorded."""

from __future__ import annotations

import base64
import html
import re
import shutil
from pathlib import Path

import pytest

from client.endpoint import Endpoint
from labs import results
from labs.loadtest.lab import LoadTest, load_test
from labs.loadtest.workload import WorkloadSpec
from labs.tour import report, sections
from labs.tour.__main__ import run_section
from labs.tour.catalogue import PARTS
from labs.tour.outline import Section
from labs.tour.readings import Reading
from labs.tour.report import SectionResult, Status, Tour
from tests.conftest import MODEL, ROOT, free_port
from tests.labs.tour.recorded import ENVELOPE, recorded_tour
from tests.support.loadtest_browser import CHROMIUM, check_page


def read(section: Section, data: dict, isa_flags: tuple[str, ...] = ()) -> Reading:
    """A section's reading, as the report reads it: through its entry in the catalogue."""
    return PARTS[section].read(data, isa_flags)


SECTION = re.compile(r'<section id="([a-z]+)">(.*?)</section>', re.S)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def tour(tmp_path: Path) -> Tour:
    return recorded_tour(tmp_path / "labs")


def rendered(folder: Path, tour: Tour) -> dict[str, str]:
    page = report.write(folder, ENVELOPE, tour).read_text()
    return dict(SECTION.findall(page))


def test_every_section_has_its_plot_its_table_and_its_reading(tmp_path: Path, tour: Tour) -> None:
    shown = rendered(tmp_path / "tour", tour)
    assert list(shown) == [section.value for section in Section]  # the course's order
    for section in Section:
        body = shown[section.value]
        (image,) = re.findall(r'src="data:image/png;base64,([^"]+)"', body)
        assert base64.b64decode(image).startswith(PNG_MAGIC), section
        assert "<table>" in body and body.count("<li>") >= 2, section
        assert (tmp_path / "tour" / f"{section.value}.png").stat().st_size > 0
    _, payload = results.load(tmp_path / "tour" / report.TOUR_JSON)  # the JSON beside it, in the envelope
    assert [item["section"] for item in payload["sections"]] == [section.value for section in Section]


def test_the_sentences_read_the_recorded_numbers_beside_the_seeds(tour: Tour) -> None:
    seed = tour.result(Section.SEED).data
    reading = read(Section.SEED, seed)
    vllm, llamacpp = seed["scaling"]["vllm"], seed["scaling"]["llamacpp"]
    assert reading.headline == f"vLLM {vllm:.2f}x vs llama.cpp {llamacpp:.2f}x"
    assert f"{vllm:.2f}x, where the seed measured 3.13x" in reading.sentences[0]
    assert PARTS[Section.SEED].reading(seed, ()).seed == PARTS[Section.SEED].seed  # the course's figure beside it

    study = tour.result(Section.BATCHING).data["results"]
    static, continuous = (next(row for row in study if row["policy"] == policy) for policy in ("static", "continuous"))
    batching = read(Section.BATCHING, tour.result(Section.BATCHING).data)
    assert f"{static['ttft_p50_ms'] / continuous['ttft_p50_ms']:.1f}x TTFT p50" in batching.headline
    assert "(the seed: 5.1x)" in batching.sentences[0]

    paging = read(Section.PAGING, tour.result(Section.PAGING).data)
    unfilled = 1 - continuous["kv_live_tokens"] / continuous["kv_paged_slots"]
    assert f"waste {unfilled:.1%}" in paging.headline and "under 4%" in paging.sentences[0]

    load = tour.result(Section.LOAD).data["points"]
    busiest = max(load, key=lambda point: point["rate"])
    assert busiest["doctor"]["advice"].rstrip(".") in " ".join(
        read(Section.LOAD, tour.result(Section.LOAD).data).sentences
    )

    quantization = tour.result(Section.QUANTIZATION).data["engines"]
    assert f"{quantization[1]['perplexity']['value']:.3f} int8" in " ".join(
        read(Section.QUANTIZATION, tour.result(Section.QUANTIZATION).data).sentences
    )
    contract = read(Section.CONTRACT, tour.result(Section.CONTRACT).data)
    assert contract.headline == "vllm 4/4 pass, llamacpp 2/4 pass"


def test_a_failed_section_says_why_in_its_place_and_the_others_still_render(tmp_path: Path, tour: Tour) -> None:
    tour.sections[3] = SectionResult(Section.LOAD, Status.FAILED, 2.0, error="python -m labs.loadtest exited with 2: x")
    shown = rendered(tmp_path / "tour", tour)
    assert "failed: python -m labs.loadtest exited with 2: x" in shown["load"] and "<img" not in shown["load"]
    assert all("<img" in shown[section.value] for section in Section if section is not Section.LOAD)


def test_odd_data_costs_only_its_own_section_the_report(tmp_path: Path, tour: Tour) -> None:
    tour.sections[0].data = {"summaries": "not a list"}
    shown = rendered(tmp_path / "tour", tour)
    assert "report failed" in shown["seed"] and "<img" in shown["contract"]


def test_a_recorded_tour_is_drawn_again_from_its_json(tmp_path: Path, tour: Tour) -> None:
    first = report.write(tmp_path / "tour", ENVELOPE, tour).read_text()
    (tmp_path / "tour" / report.REPORT_HTML).unlink()
    assert report.report(tmp_path / "tour").read_text() == first


def test_the_header_shows_lscpu_and_each_section_its_title(tmp_path: Path, tour: Tour) -> None:
    page = report.write(tmp_path / "tour", ENVELOPE, tour).read_text()
    assert "<caption>lscpu</caption>" in page and "avx512f" in page
    for title in (part.title for part in PARTS.values()):
        assert title.replace("'", "&#x27;") in page


def test_the_doctor_reads_the_busiest_moment_of_a_series() -> None:
    calm = {"running": 1.0, "waiting": 0.0, "kv_usage": 0.1, "preemptions_total": 0.0}
    busy = {"running": 4.0, "waiting": 6.0, "kv_usage": 0.2, "preemptions_total": 0.0}
    series = [{"t_s": 0.5 * index, **(busy if index == 3 else calm)} for index in range(6)]
    reading = sections.doctor_reading(series, sections.Limits(max_num_seqs=4))
    assert reading is not None and reading["state"] == "slots" and reading["at_s"] == 1.5
    assert sections.doctor_reading([], sections.Limits()) is None


def test_a_lab_that_refuses_gives_its_section_its_own_error_line(tmp_path: Path) -> None:
    """The labs are functions the sections call: the lab's own one-line error (here the load tester's, for an engine
    that does not answer) is the section's, and the tour goes on."""
    nowhere = Endpoint.at("vllm", f"http://127.0.0.1:{free_port()}/v1", MODEL, {}, url_source="VLLM_PORT")
    spec = WorkloadSpec(num_requests=1, rate_rps=None, concurrency=1)

    def measure() -> dict:
        load_test(LoadTest([nowhere], [spec], tmp_path / "loadtest", "python -m labs.tour"))
        return {}

    result = run_section(Section.LOAD, measure)
    assert result.status is Status.FAILED and result.error is not None
    assert nowhere.base_url in result.error and "VLLM_PORT" in result.error, result.error
    assert not (tmp_path / "loadtest").exists()  # nothing measured, nothing written


def test_every_section_renders_with_its_plot_in_a_real_browser(tmp_path: Path, tour: Tour) -> None:
    if not CHROMIUM.exists():
        pytest.skip("chromium is not installed (tests/system-packages.sh installs it)")
    page = check_page(report.write(tmp_path / "tour", ENVELOPE, tour))
    assert page.title == report.TITLE and not page.errors, page.errors
    assert [shown["id"] for shown in page.sections] == [section.value for section in Section]
    for shown, section in zip(page.sections, Section, strict=True):
        assert shown["heading"] == PARTS[section].title
        assert len(shown["images"]) == 1 and all(image["complete"] and image["width"] > 0 for image in shown["images"])


RECORDED_QUICK_TOUR = ROOT / "labs" / "measured" / "tour-quick-avx512-2026-12-03.json"  # a real --quick tour, 2 cores


def test_a_real_quick_tour_is_drawn_again_every_section_reading_its_own_numbers(tmp_path: Path) -> None:
    folder = tmp_path / "tour"
    folder.mkdir()
    shutil.copy(RECORDED_QUICK_TOUR, folder / report.TOUR_JSON)
    shown = dict(SECTION.findall(report.report(folder).read_text()))
    assert list(shown) == [section.value for section in Section]
    _, payload = results.load(folder / report.TOUR_JSON)
    recorded = {item["section"]: item["data"] for item in payload["sections"]}
    for section in Section:
        assert shown[section.value].count("<img") == 1 and "report failed" not in shown[section.value], section
        reading = read(section, recorded[section.value], ("avx512f",))
        assert html.escape(reading.headline) in shown[section.value], section
    assert f"vLLM {recorded['seed']['scaling']['vllm']:.2f}x" in shown["seed"]
