"""The step profiler (benchmarks/step_profile.py): py-spy on the session's real vLLM, its three processes.

The full profile (1 and 16 users, 8-second windows) is what labs/throughput.md reports; here the page's command
runs verbatim against the session server, in its smallest configuration.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import step_ops
from benchmarks.step_profile import (
    CATEGORIES,
    IDLE,
    MODEL_IN_ENGINE_CORE,
    NATIVE,
    OTHER,
    ROLES,
    categorize,
    key_of,
    read_folded,
)
from serve.engines.vllm_log import compiled_artifact
from serve.processes import run_record
from tests.conftest import ROOT, Server
from tests.support.docs import doc_commands, run_doc

PAGE_COMMAND = ".venv/bin/python -m benchmarks.step_profile"
# Stacks as py-spy 0.4 writes them for vLLM 0.32's worker (trimmed): a decode step's sampler, its forward.
SAMPLER = [
    "worker_busy_loop (vllm/v1/executor/multiproc_executor.py:900)",
    "CPUModelRunner.sample_tokens (vllm/v1/worker/gpu_model_runner.py:3300)",
    "Sampler.forward (vllm/v1/sample/sampler.py:90)",
]
FORWARD = [
    "worker_busy_loop (vllm/v1/executor/multiproc_executor.py:900)",
    "CPUModelRunner.execute_model (vllm/v1/worker/gpu_model_runner.py:3100)",
    "LlamaForCausalLM.forward (vllm/model_executor/models/llama.py:600)",
]


def test_a_sample_belongs_to_the_first_category_found_on_its_stack() -> None:
    assert categorize(SAMPLER, "worker") == "sampling"
    assert categorize(FORWARD, "worker").startswith("model forward")
    assert categorize(["main (x.py:1)"], "worker") == OTHER
    assert set(CATEGORIES) == set(ROLES)


def test_folded_stacks_count_the_main_thread_only(tmp_path: Path) -> None:
    folded = tmp_path / "w.folded"
    folded.write_text(
        f"thread (7): MainThread;{';'.join(SAMPLER)} 30\n"
        f"thread (7): MainThread;{';'.join(FORWARD)} 70\n"
        "thread (9): Thread-1 (poll);run (threading.py:1) 500\n"
    )
    profile = read_folded(folded, "worker", 7)
    assert profile.samples == 100
    assert profile.by_category["sampling"] == 30 and sum(profile.by_category.values()) == 100


def test_bad_input_is_one_line_naming_the_fix() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.step_profile", "--users", "0,16"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the kit's promise for a bad argument (ui/cli.py): exit status 2, one line on stderr naming the fix
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and result.stderr == (
        "error: python -m benchmarks.step_profile: argument --users: '0,16': give whole numbers > 0 separated by "
        "commas, e.g. 1,4,8,16 (see --help)\n"
    ), result.stderr


@pytest.mark.server
@pytest.mark.slow
def test_lab_page_profile_runs_against_the_session_server(vllm_server: Server, tmp_path: Path) -> None:
    """The page's command, attached to the real server: every process sampled, the step's time accounted for."""
    assert PAGE_COMMAND in doc_commands("labs/throughput.md")
    smallest = f" --attach {vllm_server.api_url} --users 2 --window 3 --rate 100 --out {tmp_path}"
    result = run_doc(PAGE_COMMAND + smallest, vllm_server.env, timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    [point] = report["points"]
    assert point["users"] == 2 and point["plain"]["steps"] > 0 and point["plain"]["step_ms"] > 0
    weights = point["weights"]  # the floor: the weights read once at the bandwidth measured in the same run
    assert weights["weight_bytes"] > 100e6 and 0 < weights["read_ms"] < point["plain"]["step_ms"], weights
    assert report["machine"]["isa"] in {"AVX-512 + AMX", "AVX-512 + BF16", "AVX-512", "AVX2", "other"}
    # three processes, or two where the engine core runs the model itself (the in-process executor, AVX2's default)
    assert set(point["processes"]) in (set(ROLES), {"api server", MODEL_IN_ENGINE_CORE}), point["processes"]
    for role, process in point["processes"].items():
        assert process["samples"] > 100, role  # 3 s at 100 Hz of its main thread
        shares = {row["category"]: row["share"] for row in process["rows"]}
        assert abs(sum(shares.values()) - 1) < 1e-9, role
        assert shares.get(OTHER, 0) < 0.5, (role, shares)  # the categories name what each process does
    model_runner = "worker" if "worker" in point["processes"] else MODEL_IN_ENGINE_CORE
    worker = {row["category"] for row in point["processes"][model_runner]["rows"]}
    assert any(name.startswith("model forward") for name in worker), worker
    if model_runner == "worker":
        assert "waiting for the engine core (shm queue)" in worker, worker  # the hand-over every step has
    again = run_doc(f"{PAGE_COMMAND} --reread {tmp_path}", vllm_server.env, timeout_s=120)  # nothing runs
    assert again.returncode == 0 and json.loads((tmp_path / "results.json").read_text())["points"] == [point], (
        again.stdout + again.stderr
    )
    assert sorted(path.name for path in tmp_path.glob("*.folded")) == sorted(
        f"2-users-{role.replace(' ', '-')}.folded" for role in point["processes"]
    )


@pytest.mark.server
def test_the_session_servers_compiled_step_is_counted_in_its_cpp_wrapper(vllm_server: Server) -> None:
    """The kit's default engine (CPP_WRAPPER=auto) runs its step through inductor's C++ wrapper: the compiled model its
    log names holds it, and the count finds each layer's four linears and two vLLM ops in it, no Python between."""
    record = run_record.live(vllm_server.port)
    assert record is not None and record.log_path
    artifact = compiled_artifact(Path(record.log_path).read_text(errors="replace"))
    assert artifact is not None, "the session's engine names no compiled model in its log"
    ops = step_ops.of_artifact(Path(artifact))
    layers = json.loads((Path(record.weights.path) / "config.json").read_text())["num_hidden_layers"]
    assert ops.wrapper == "c++" and ops.python_bookkeeping == 0
    assert ops.op_calls["linears"] == 4 * layers, ops  # qkv, o, gate_up, down
    assert ops.op_calls["vllm_ops"] == 2 * layers, ops  # attention and the KV-cache write
    assert ops.op_calls["fused_kernels"] >= 2 * layers, ops  # at least a norm and an activation a layer


def test_each_category_has_a_short_key_of_its_own_in_its_process() -> None:
    """A page points into results.json by these keys (`/points/users=1/processes/worker/rows/key=lm-head/...`)."""
    for rules in CATEGORIES.values():
        keys = [key_of(rule.name) for rule in rules] + [key_of(name) for name in (IDLE, NATIVE, OTHER)]
        assert len(set(keys)) == len(keys), keys
        assert all(re.fullmatch(r"[a-z0-9-]+", key) for key in keys), keys
    assert key_of("lm head (logits)") == "lm-head"
