"""The engine-comparison lab end to end against both real engines, its bad-input paths, and its lab page."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import pytest

from benchmarks.fresh_machine import fresh_clone, user_env
from labs.compare.workload import MATCHED_PROMPTS, SEED_PROMPTS, matched_prompts
from labs.results import load
from tests.conftest import LLAMACPP_MODEL, MODEL, ROOT, Server, free_port, start_llamacpp, stop_server
from tests.support.docs import doc_commands, run_doc
from tests.support.ollama_standin import ollama_standin

pytestmark = [pytest.mark.server, pytest.mark.slow]
SMALL_N = 2
QUEUED_OVERLAP_S = 0.05  # how far one queued answer's end may trail the next one's first token (client clocks)
SHORT_MAX_TOKENS = "16"
REQUEST_LINE = re.compile(
    r"^(vllm|llamacpp)\s+(seed sequential|matched sequential|matched concurrent)\s+#\d+\s+"
    r"(HTTP \d+|no answer)\s+time_total\s+[\d.]+ s",
    re.M,
)


def both_env(vllm: Server, llamacpp: Server, **overrides: str) -> dict[str, str]:
    return {**vllm.env, "ENGINES": "vllm,llamacpp", "LLAMACPP_PORT": str(llamacpp.port), **overrides}


def compare(env: dict[str, str], *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labs.compare", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_matched_prompts_cycle_the_three_and_refuse_non_positive_n() -> None:
    assert matched_prompts(3) == MATCHED_PROMPTS
    assert matched_prompts(8)[3:6] == MATCHED_PROMPTS and len(matched_prompts(8)) == 8
    for bad in (0, -2):
        with pytest.raises(ValueError, match="greater than 0"):
            matched_prompts(bad)


def _tokens(record: dict) -> int:
    """usage.completion_tokens, or the streamed chunks where the server sent no usage (llama.cpp)."""
    return record["output_tokens"] if record["output_tokens"] is not None else len(record["chunk_times_s"])


def test_both_engines_end_to_end(vllm_server: Server, llamacpp_server: Server, tmp_path: Path) -> None:
    folder = tmp_path / "results"
    result = compare(
        both_env(vllm_server, llamacpp_server),
        "--n",
        str(SMALL_N),
        "--max-tokens",
        SHORT_MAX_TOKENS,
        "--results",
        str(folder),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    per_engine = len(SEED_PROMPTS) + 2 * SMALL_N
    assert len(REQUEST_LINE.findall(result.stdout)) == 2 * per_engine, result.stdout

    document = json.loads((folder / "comparison-results.json").read_text())
    assert [(phase["engine"], phase["mode"]) for phase in document["phases"]] == [
        (engine, mode)
        for engine in ("vllm", "llamacpp")
        for mode in ("seed sequential", "matched sequential", "matched concurrent")
    ]
    assert {facts["engine"]: facts["model"] for facts in document["engines"]} == {
        "vllm": MODEL,
        "llamacpp": LLAMACPP_MODEL,
    }
    assert document["machine"]["usable_cores"] >= 1 and document["config"]["n"] == SMALL_N
    envelope, _ = load(folder / "comparison-results.json")
    assert [(engine.kind, engine.model) for engine in envelope.engines] == [
        ("vllm", MODEL),
        ("llamacpp", LLAMACPP_MODEL),
    ]
    assert envelope.command.startswith("python -m labs.compare --n") and envelope.machine.usable_cores >= 1
    for phase in document["phases"]:
        for record in phase["records"]:
            assert record["status"] == 200 and record["done_s"] >= record["sent_s"] > 0
    summaries = {(summary["engine"], summary["mode"]): summary for summary in document["summaries"]}
    vllm_concurrent = summaries[("vllm", "matched concurrent")]
    assert vllm_concurrent["num_ok"] == SMALL_N and vllm_concurrent["output_tokens"] > 0
    for summary in summaries.values():
        assert (
            summary["num_ok"] + summary["num_truncated"] + summary["num_empty"] + summary["num_failed"]
            == summary["num_requests"]
        )
        ok_tokens = sum(
            _tokens(record)
            for phase in document["phases"]
            for record in phase["records"]
            if (phase["engine"], phase["mode"]) == (summary["engine"], summary["mode"]) and record["outcome"] == "ok"
        )
        assert summary["output_tokens"] == ok_tokens
        assert summary["output_tokens_per_s"] == pytest.approx(ok_tokens / summary["wall_s"])
    assert all(summary["tokens_source"] == "usage" for (engine, _), summary in summaries.items() if engine == "vllm")
    # the kit's llama.cpp queues, as Ollama does by default: every concurrent answer completes
    llamacpp_concurrent = summaries[("llamacpp", "matched concurrent")]
    assert llamacpp_concurrent["num_ok"] == SMALL_N and llamacpp_concurrent["tokens_source"] == "usage"  # as vLLM
    assert "TRUNCATED" not in result.stdout and "cut short" not in result.stdout
    for engine in ("vllm", "llamacpp"):
        sequential = summaries[(engine, "matched sequential")]["wall_s"]
        concurrent = summaries[(engine, "matched concurrent")]["wall_s"]
        assert document["scaling"][engine] == pytest.approx(sequential / concurrent)

    text = (folder / "comparison-results.txt").read_text()
    assert "matched concurrent" in text and "scaling" in text and "time_total" in text
    assert (folder / "comparison-wall-time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_their_ollama_beside_the_kits_vllm_named_with_endpoint(
    vllm_server: Server, llamacpp_server: Server, tmp_path: Path
) -> None:
    """--endpoint takes any OpenAI-compatible engine by name, as labs.loadtest does: the learner's own Ollama. No
    registry here ships Ollama, so theirs is tests/support/ollama_standin.py (a stand-in, named as one), passing
    /v1 on to the kit's real llama.cpp server, as a real Ollama serves it from llama.cpp."""
    folder = tmp_path / "results"
    with ollama_standin(free_port(), upstream=llamacpp_server.base_url) as ollama:
        result = compare(
            {**vllm_server.env, "ENGINES": "vllm"},
            "--endpoint",
            f"ollama={ollama}/v1@{LLAMACPP_MODEL}",
            "--endpoint",
            f"kit-vllm={vllm_server.api_url}",  # no @MODEL: the first /v1/models lists
            "--n",
            str(SMALL_N),
            "--max-tokens",
            SHORT_MAX_TOKENS,
            "--results",
            str(folder),
        )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((folder / "comparison-results.json").read_text())
    assert {facts["engine"]: facts["model"] for facts in document["engines"]} == {
        "ollama": LLAMACPP_MODEL,
        "kit-vllm": MODEL,
    }
    summaries = {(summary["engine"], summary["mode"]): summary for summary in document["summaries"]}
    assert summaries[("ollama", "matched concurrent")]["num_ok"] == SMALL_N
    assert summaries[("kit-vllm", "matched concurrent")]["num_ok"] == SMALL_N
    assert document["config"]["engine_settings"]["ollama"] == f"(named on the command line: {ollama}/v1)"
    duplicate = compare(vllm_server.env, "--endpoint", f"a={vllm_server.api_url}", "--endpoint", f"a={ollama}/v1")
    assert duplicate.returncode == 2 and "two engines are both called 'a'" in duplicate.stderr, duplicate.stderr


@contextmanager
def cutting_stand_in(tokens: int) -> Iterator[str]:
    """A fake engine, named as such (benchmarks/stream_server.py): every answer ends after `tokens` tokens with HTTP
    200, [DONE] and no finish reason, a fault no engine of the kit produces on demand. Its /v1 URL."""
    port = free_port()
    argv = [sys.executable, "-m", "benchmarks.stream_server", "--port", str(port), "--cut-short-after", str(tokens)]
    server = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and "listening" in server.stdout.readline()
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_answers_cut_short_are_counted_not_hidden(vllm_server: Server, tmp_path: Path) -> None:
    """A server that ends a stream early with HTTP 200 (llama-cpp-python's did when another request came): the lab
    counts the answers as truncated and says its scaling is not a speed-up."""
    with cutting_stand_in(tokens=2) as url:
        result = compare(
            vllm_server.env,
            "--engines",
            "vllm",
            "--endpoint",
            f"cutting={url}@fake-stream",
            "--n",
            str(SMALL_N),
            "--max-tokens",
            SHORT_MAX_TOKENS,
            "--results",
            str(tmp_path / "results"),
        )
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((tmp_path / "results" / "comparison-results.json").read_text())
    concurrent = next(
        summary
        for summary in document["summaries"]
        if summary["mode"] == "matched concurrent" and summary["engine"] == "cutting"
    )
    assert concurrent["num_truncated"] == SMALL_N
    assert "TRUNCATED" in result.stdout and "not a speed-up" in result.stdout and "cut short" in result.stdout


def assert_one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    errors = [line for line in output.splitlines() if line.startswith("error:") or ": error:" in line]
    assert len(errors) == 1, output
    assert "Traceback" not in output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_unreachable_engine_is_one_line_and_measures_nothing(vllm_server: Server, tmp_path: Path) -> None:
    port = free_port()
    result = compare(
        {**vllm_server.env, "ENGINES": "vllm,llamacpp", "LLAMACPP_PORT": str(port)}, "--results", str(tmp_path / "none")
    )
    assert_one_error_line(result, f"cannot reach llamacpp at http://127.0.0.1:{port}/v1", "LLAMACPP_PORT")
    assert not (tmp_path / "none").exists()


def test_wrong_model_lists_what_is_served(vllm_server: Server, tmp_path: Path) -> None:
    result = compare({**vllm_server.env, "MODEL_NAME": "llama3:8b"}, "--results", str(tmp_path / "none"))
    assert_one_error_line(result, "does not serve model 'llama3:8b'", MODEL)


@pytest.mark.parametrize("n", ["0", "-3", "three"])
def test_non_positive_n_is_refused(n: str) -> None:
    result = compare({}, "--n", n, timeout_s=60)
    assert_one_error_line(result, f"argument -n/--n: '{n}' is not a whole number greater than 0")


def test_a_dead_engine_mid_run_keeps_the_results(tmp_path: Path) -> None:
    server = start_llamacpp()  # its own server: this test kills it
    pidfile = ROOT / ".kit" / "run" / f"llamacpp-{server.port}.pid"
    folder = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labs.compare", "--engines", "llamacpp", "--n", "12", "--results", str(folder)],
        cwd=ROOT,
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "matched sequential  #1" in line:  # the seed run is done: the engine crashes mid-phase
                os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)  # "pid start-time"
                break
        lines.extend(proc.stdout)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_server(server)
    output = "".join(lines)
    assert proc.returncode == 1, output
    assert "stopped answering" in output and "Traceback" not in output
    document = json.loads((folder / "comparison-results.json").read_text())
    seed = document["phases"][0]
    assert seed["mode"] == "seed sequential" and all(record["outcome"] == "ok" for record in seed["records"])
    assert any("stopped answering" in note for note in document["notes"])
    assert (folder / "comparison-results.txt").exists() and (folder / "comparison-wall-time.png").exists()


def test_lab_page_commands_run_verbatim_in_a_clone_with_an_untouched_env(
    vllm_server: Server, llamacpp_server: Server, tmp_path: Path
) -> None:
    """As a user runs the page: a fresh clone, .env made by up.sh from .env.example (ENGINES=vllm), nothing
    exported but the ports of the test's servers. `ENGINES=... bash up.sh` sets ENGINES for up.sh alone,
    so the lab's own commands must name both engines; its default run shows llama.cpp queueing (scaling about
    1, nothing cut short) and vLLM batching (scaling above 2 at N=8)."""
    commands = doc_commands("labs/compare.md")
    assert commands[0] == "ENGINES=vllm,llamacpp bash up.sh" and commands[-1] == "ENGINES=vllm,llamacpp bash down.sh"
    clone = fresh_clone(tmp_path / "kit")
    for shared in (".kit", ".venv"):  # the engines' installs and the servers' pidfiles; the light tools
        (clone / shared).symlink_to(ROOT / shared)
    env = {**user_env(vllm_server.port), "LLAMACPP_PORT": str(llamacpp_server.port)}
    up = run_doc(commands[0], env, timeout_s=300, cwd=clone)
    assert up.returncode == 0 and "already up" in up.stdout and "llama.cpp already up" in up.stdout, up.stdout
    assert (clone / ".env").read_text() == (clone / ".env.example").read_text()
    scalings: dict[str, dict[str, float]] = {}
    for command in commands[1:-1]:
        result = run_doc(command, env, timeout_s=600, cwd=clone)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        factors = dict(re.findall(r"^(\w+): matched sequential / concurrent = ([\d.]+)x", result.stdout, re.M))
        assert set(factors) == {"vllm", "llamacpp"}, result.stdout
        assert "cut short" not in result.stdout and "TRUNCATED" not in result.stdout, result.stdout
        written = re.search(r"Wrote (\S+comparison-results\.txt)", result.stdout)
        assert written and Path(written.group(1)).is_relative_to(clone)
        scalings[command] = {engine: float(factor) for engine, factor in factors.items()}
        # llama.cpp queues: its concurrent answers stream one after another, never side by side (a structural
        # fact, unlike its scaling ratio, which a machine whose load changes between the phases moves)
        _, document = load(Path(written.group(1)).with_name("comparison-results.json"))
        [queued] = [phase for phase in document["phases"] if phase["engine"] == "llamacpp" and phase["concurrent"]]
        streams = sorted((record["first_token_s"], record["done_s"]) for record in queued["records"])
        overlaps_s = [previous_done - first_token for (_, previous_done), (first_token, _) in pairwise(streams)]
        assert len(streams) > 1 and max(overlaps_s) < QUEUED_OVERLAP_S, (command, overlaps_s)
    at_8 = next(factors for command, factors in scalings.items() if "--n 8" in command)
    assert at_8["vllm"] > 2, scalings  # vLLM batches: 3.75x at N=8 even on a loaded machine
    # down.sh stops what up.sh started; run against a fresh llama.cpp so the shared servers live on
    spare = start_llamacpp()
    down = run_doc(commands[-1], {**user_env(free_port()), "LLAMACPP_PORT": str(spare.port)}, timeout_s=120, cwd=clone)
    assert down.returncode == 0 and f"port {spare.port} is free" in down.stdout, down.stdout
