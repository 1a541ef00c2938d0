"""labs/results.py: every lab's results file round-trips through its envelope, and a foreign file is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labs.results import (
    SCHEMA_VERSION,
    Envelope,
    MachineFacts,
    MeasuredEngine,
    ResultsError,
    command_line,
    kit_version,
    load,
    write,
)
from serve.config.machine import detect
from tests.conftest import ROOT


def test_an_envelope_and_its_payload_round_trip(tmp_path: Path) -> None:
    engines = [
        MeasuredEngine("SmolLM2-135M-Instruct", "http://127.0.0.1:8009", "vllm", "0.11.0"),
        MeasuredEngine("smollm2", kind="teaching-engine"),
    ]
    envelope = Envelope.now(command_line("python -m labs.loadtest", ["--rate", "5", "--out", "a b"]), engines)
    payload = {"runs": [{"ttft_ms": {"median": 12.5, "p99": float("nan")}}], "note": "ü"}
    path = write(tmp_path / "deep" / "summary.json", envelope, payload)

    loaded, read_back = load(path)
    assert loaded == envelope
    assert read_back == {"runs": [{"ttft_ms": {"median": 12.5, "p99": None}}], "note": "ü"}  # NaN: null
    assert envelope.command == "python -m labs.loadtest --rate 5 --out 'a b'"
    assert envelope.schema_version == SCHEMA_VERSION and envelope.kit_version == kit_version() != "unknown"
    assert envelope.created_utc.endswith("+00:00")
    machine = detect()
    assert envelope.machine.usable_cores == machine.usable_cores >= 1
    assert set(envelope.machine.isa_flags) <= machine.cpu_flags and envelope.machine.cpu_model
    assert json.loads(path.read_text())["runs"] == read_back["runs"]  # the payload's keys stay at the top


def test_the_kit_version_is_the_one_pyproject_declares() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert kit_version() == declared


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read"),
        ("not json", "is not JSON"),
        ('{"runs": []}', "has no results envelope"),
        ('[1, 2]', "has no results envelope"),
        ('{"envelope": {"schema_version": 99}}', "schema version 99 and this kit reads version 1"),
        ('{"envelope": {"schema_version": 1, "kit_version": "0"}}', "broken results envelope"),
    ],
)
def test_load_refuses_a_file_it_cannot_read_in_one_line(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ResultsError, match=expected) as caught:
        load(path)
    assert len(str(caught.value).splitlines()) == 1


def test_a_payload_cannot_hide_the_envelope(tmp_path: Path) -> None:
    envelope = Envelope(SCHEMA_VERSION, "0", "x", MachineFacts("cpu", 1, None, 1, (), "linux", "3.11"))
    with pytest.raises(ValueError, match="rename it"):
        write(tmp_path / "results.json", envelope, {"envelope": 1})


def test_the_envelope_module_stays_light() -> None:
    check = subprocess.run(
        [sys.executable, "-c", "import sys, labs.results; print(sorted({'torch', 'vllm'} & set(sys.modules)))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.stdout.strip() == "[]", check.stderr
