"""The engine behind its OpenAI-compatible API, measured by the kit's own request timer (labs.common.stream)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from labs.common.stream import RequestRecord, chat_payload, stream_chat
from labs.engine.server import SERVED_MODEL_NAME
from tests.labs.engine.needs_torch.conftest import ROOT, TEST_THREADS, free_port

START_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "labs.engine.server", "--port", str(port), "--max-batch", "4",
                                "--num-blocks", "128", "--threads", str(TEST_THREADS)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, process.stdout.read()
            try:
                if httpx.get(f"{base_url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the engine server did not become healthy"
            time.sleep(0.5)
        yield f"{base_url}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_streaming_chat_is_timed_like_vllm(api_url: str) -> None:
    async def send(max_tokens: int, request_id: int) -> RequestRecord:
        payload = chat_payload(SERVED_MODEL_NAME, [{"role": "user", "content": "Name a fruit."}], max_tokens,
                               ignore_eos=True)
        async with httpx.AsyncClient(timeout=120) as http:
            return await stream_chat(http, api_url, payload, RequestRecord(request_id, max_tokens, time.perf_counter()))

    async def both() -> list[RequestRecord]:
        return await asyncio.gather(send(8, 0), send(12, 1))

    records = asyncio.run(both())
    for record in records:
        assert record.outcome == "ok", record.to_dict()
        assert record.finish_reason == "length" and record.output_tokens == record.max_tokens
        assert record.first_token_s is not None and record.chunk_times_s and record.prompt_tokens > 10


def test_non_streaming_answer_models_and_metrics(api_url: str) -> None:
    body = {"model": SERVED_MODEL_NAME, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12, "temperature": 0}
    answer = httpx.post(f"{api_url}/chat/completions", json=body, timeout=120).json()
    assert "Paris" in answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] <= 12
    assert httpx.get(f"{api_url}/models").json()["data"][0]["id"] == SERVED_MODEL_NAME
    metrics = httpx.get(api_url.removesuffix("/v1") + "/metrics").text
    assert "vllm:num_requests_running" in metrics and "vllm:kv_cache_usage_perc" in metrics


def test_bad_requests_get_openai_style_errors(api_url: str) -> None:
    wrong_model = httpx.post(f"{api_url}/chat/completions", json={"model": "nope", "messages": []})
    assert wrong_model.status_code == 404 and SERVED_MODEL_NAME in wrong_model.json()["error"]["message"]
    no_messages = httpx.post(f"{api_url}/chat/completions", content=b"{not json")
    assert no_messages.status_code == 400 and "messages" in json.dumps(no_messages.json())
