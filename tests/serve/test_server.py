"""The real vLLM server that up.sh starts: the OpenAI contract, /health, /metrics, the client, idempotence."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve.config.machine import detect
from serve.config.model import bundled_model_facts
from serve.config.plan import resolve
from serve.config.settings import Settings
from serve.config.sizing import GiB, kv_pool
from serve.processes.local_server import LOG_DIR
from tests.conftest import MODEL, ROOT, Server, run_script

pytestmark = [pytest.mark.server, pytest.mark.slow]


def chat(server: Server, **body: object) -> httpx.Response:
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 8, **body}
    return httpx.post(f"{server.api_url}/chat/completions", json=payload, timeout=120)


def test_up_recaps_url_model_and_kv_cache(vllm_server: Server) -> None:
    assert f"{vllm_server.api_url}" in vllm_server.up_output
    assert MODEL in vllm_server.up_output
    assert "tokens; max concurrency" in vllm_server.up_output


def test_up_recaps_every_auto_as_vllm_got_it(vllm_server: Server) -> None:
    resolved = resolve(Settings.from_env(vllm_server.env), detect(), bundled_model_facts())
    recap = " ".join(vllm_server.up_output.split())  # rich wraps long rows
    for line in (
        f"dtype {resolved.dtype} ({resolved.dtype_reason})",
        f"threads {resolved.omp_threads} ({resolved.omp_threads_reason})",
        f"max num seqs {resolved.max_num_seqs} ({resolved.max_num_seqs_reason})",
        f"KV budget {resolved.kv_cache_space_gib} GiB ({resolved.kv_cache_space_reason})",
    ):
        assert line in recap, recap
    log = (LOG_DIR / f"vllm-{vllm_server.port}.log").read_text()
    assert f"'max_num_seqs': {resolved.max_num_seqs}" in log  # vLLM's own echo of its arguments
    pool = kv_pool(bundled_model_facts(), resolved.dtype, resolved.kv_cache_space_gib * GiB)
    assert f"{pool.num_tokens:,} tokens" in recap  # the KV line vLLM logged: the budget it was given


def test_health(vllm_server: Server) -> None:
    assert httpx.get(f"{vllm_server.base_url}/health", timeout=10).status_code == 200


def test_chat_completion_answers_with_usage(vllm_server: Server) -> None:
    response = chat(vllm_server)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == MODEL
    assert body["choices"][0]["message"]["content"].strip()
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_completions_endpoint(vllm_server: Server) -> None:
    response = httpx.post(
        f"{vllm_server.api_url}/completions",
        timeout=120,
        json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 5},
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"]


def test_streaming_delivers_chunks_and_usage(vllm_server: Server) -> None:
    payload = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count to five."}],
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, usage = [], None
    with httpx.stream("POST", f"{vllm_server.api_url}/chat/completions", json=payload, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                chunks.append(event["choices"][0]["delta"]["content"])
            usage = event.get("usage") or usage
    assert len(chunks) > 1
    assert usage is not None and usage["completion_tokens"] >= len(chunks) - 1


def test_models_lists_the_served_name(vllm_server: Server) -> None:
    models = httpx.get(f"{vllm_server.api_url}/models", timeout=10).json()
    assert [model["id"] for model in models["data"]] == [MODEL]


def test_metrics_expose_the_three_gauges(vllm_server: Server) -> None:
    chat(vllm_server)
    text = httpx.get(f"{vllm_server.base_url}/metrics", timeout=10).text
    names = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert gauge in names


def run_client(server: Server, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "client", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=server.client_env(**env),
    )


def test_client_streams_an_answer(vllm_server: Server) -> None:
    result = run_client(vllm_server, "--max-tokens", "12", "Say OK.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_client_without_streaming_and_with_options(vllm_server: Server) -> None:
    result = run_client(
        vllm_server,
        "--no-stream",
        "--max-tokens",
        "8",
        "--temperature",
        "0",
        "--system",
        "Answer in one word.",
        "What colour is the sky?",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_client_names_the_served_models_for_a_wrong_model(vllm_server: Server) -> None:
    result = run_client(vllm_server, "Hi", MODEL="llama3:8b")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "MODEL='llama3:8b' is not served" in result.stderr and MODEL in result.stderr


def test_client_explains_an_unreachable_engine(vllm_server: Server) -> None:
    result = run_client(vllm_server, "Hi", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert result.returncode == 1
    assert "cannot reach an engine at http://127.0.0.1:9/v1" in result.stderr and "Traceback" not in result.stderr


def test_up_again_is_idempotent(vllm_server: Server) -> None:
    result = run_script("up.sh", vllm_server.env, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "already up" in result.stdout
    assert "Starting vLLM" not in result.stdout
