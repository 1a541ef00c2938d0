"""The engine behind its OpenAI-compatible API, measured by the kit's own request timer (client.stream)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from client.stream import RequestRecord, chat_payload, stream_chat
from labs.engine.server import SERVED_MODEL_NAME
from serve.processes.process import free_port
from tests.labs.engine.needs_torch.conftest import ROOT, TEST_THREADS

START_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labs.engine.server",
            "--port",
            str(port),
            "--max-batch",
            "4",
            "--num-blocks",
            "128",
            "--threads",
            str(TEST_THREADS),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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
        payload = chat_payload(
            SERVED_MODEL_NAME, [{"role": "user", "content": "Name a fruit."}], max_tokens, ignore_eos=True
        )
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
    body = {
        "model": SERVED_MODEL_NAME,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 12,
        "temperature": 0,
    }
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


def test_the_stock_sdk_completions_create_works_streamed_and_not(api_url: str) -> None:
    sdk = openai.OpenAI(base_url=api_url, api_key="none", max_retries=0)
    answer = sdk.completions.create(
        model=SERVED_MODEL_NAME, prompt="The capital of France is", max_tokens=5, temperature=0
    )
    assert answer.object == "text_completion" and "Paris" in answer.choices[0].text
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 5
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 5
    chunks = list(
        sdk.completions.create(
            model=SERVED_MODEL_NAME,
            prompt="The capital of France is",
            max_tokens=5,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(choice.text for chunk in chunks for choice in chunk.choices) == answer.choices[0].text
    assert [choice.finish_reason for choice in chunks[-2].choices] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_a_stop_sequence_ends_the_answer_just_before_it_streamed_and_not(api_url: str) -> None:
    sdk = openai.OpenAI(base_url=api_url, api_key="none", max_retries=0)
    ask = {
        "model": SERVED_MODEL_NAME,
        "messages": [{"role": "user", "content": "Count from 1 to 20."}],
        "max_tokens": 12,
        "temperature": 0,
    }
    baseline = sdk.chat.completions.create(**ask).choices[0].message.content
    stop = baseline.split()[2]
    expected = baseline[: baseline.index(stop)]
    for stops in (stop, ["never-there", stop]):
        choice = sdk.chat.completions.create(**ask, stop=stops).choices[0]
        assert (choice.message.content, choice.finish_reason) == (expected, "stop"), (baseline, stops)
    streamed = list(sdk.chat.completions.create(**ask, stop=stop, stream=True))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed) == expected
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_parameters_it_lacks_or_bad_values_get_a_400_naming_them(api_url: str) -> None:
    chat = {"model": SERVED_MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    for extra, param in (
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"stop": [""]}, "stop"),
    ):
        refused = httpx.post(f"{api_url}/chat/completions", json={**chat, **extra}, timeout=30)
        error = refused.json()["error"]
        assert refused.status_code == 400 and error["param"] == param and error["code"] == 400, refused.text
        assert set(error) == {"message", "type", "param", "code"} and param in error["message"]
    no_prompt = httpx.post(f"{api_url}/completions", json={"model": SERVED_MODEL_NAME, "max_tokens": 2}, timeout=30)
    assert no_prompt.status_code == 400 and no_prompt.json()["error"]["param"] == "prompt"
    accepted = httpx.post(f"{api_url}/chat/completions", json={**chat, "n": 1, "logprobs": False}, timeout=60)
    assert accepted.status_code == 200, accepted.text
