"""The Ollama-class engine: a real llama.cpp server started by up.sh, and the client switch between engines."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import httpx
import pytest

from client.stream import RequestRecord, chat_payload, stream_chat
from serve.config.settings import Settings
from tests.conftest import LLAMACPP_MODEL, ROOT, Server, free_port, kit_env, run_script, start_llamacpp
from ui.values import SettingsError

pytestmark = [pytest.mark.server, pytest.mark.slow]


def chat(server: Server, **body: object) -> httpx.Response:
    payload = {"model": LLAMACPP_MODEL, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 8, **body}
    return httpx.post(f"{server.api_url}/chat/completions", json=payload, timeout=120)


@pytest.mark.parametrize("value", ["", "ollama", "vllm,vllm", "vllm;llamacpp"])
def test_bad_engines_value_names_the_fix(value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"ENGINES": value})
    assert str(caught.value).startswith(f"ENGINES={value!r} is invalid") and "vllm,llamacpp" in str(caught.value)


def test_up_starts_it_on_127_0_0_1_with_the_ollama_name(llamacpp_server: Server) -> None:
    assert f"{llamacpp_server.api_url}" in llamacpp_server.up_output
    assert "llama.cpp is up" in llamacpp_server.up_output and "Starting vLLM" not in llamacpp_server.up_output
    models = httpx.get(f"{llamacpp_server.api_url}/models", timeout=10).json()
    assert [model["id"] for model in models["data"]] == [LLAMACPP_MODEL]
    with pytest.raises(httpx.ConnectError):  # bound to loopback only
        httpx.get(f"http://{_outward_address()}:{llamacpp_server.port}/v1/models", timeout=5)


def _outward_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("10.255.255.255", 1))  # no packet is sent; it picks the outward interface
        return sock.getsockname()[0]


def test_it_serves_ollamas_v1_but_not_its_api_routes_and_the_settings_say_so(llamacpp_server: Server) -> None:
    """.env.example used to say Ollama clients need no change: those of Ollama's own /api do (they get 404)."""
    assert httpx.get(f"{llamacpp_server.base_url}/api/tags", timeout=10).status_code == 404
    assert httpx.get(f"{llamacpp_server.api_url}/models", timeout=10).status_code == 200
    said = next(line for line in (ROOT / ".env.example").read_text().splitlines() if "llama.cpp server's /v1" in line)
    assert "Ollama's own /api routes are not served" in said and "Ollama clients need no change" not in said


def test_chat_completion_answers_with_usage(llamacpp_server: Server) -> None:
    response = chat(llamacpp_server)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"].strip()
    assert 0 < body["usage"]["completion_tokens"] <= 8


def test_up_again_is_idempotent(llamacpp_server: Server) -> None:
    result = run_script("up.sh", llamacpp_server.env, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "llama.cpp already up" in result.stdout and "Starting llama.cpp" not in result.stdout


def run_client(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "client", "--max-tokens", "12", "--temperature", "0", "Say OK."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_the_same_client_talks_to_both_engines_only_two_variables_change(
    vllm_server: Server, llamacpp_server: Server
) -> None:
    to_vllm = vllm_server.client_env()
    to_llamacpp = {**to_vllm, "OPENAI_BASE_URL": llamacpp_server.api_url, "MODEL": LLAMACPP_MODEL}
    changed = {key for key in to_vllm.keys() | to_llamacpp.keys() if to_vllm.get(key) != to_llamacpp.get(key)}
    assert changed == {"OPENAI_BASE_URL", "MODEL"}
    for env in (to_vllm, to_llamacpp):
        result = run_client(env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip()


async def _two_overlapping_streams(server: Server) -> list[RequestRecord]:
    payload = chat_payload(LLAMACPP_MODEL, [{"role": "user", "content": "Tell a long story about a cat."}], 64)
    async with httpx.AsyncClient(timeout=120) as http:
        records = [RequestRecord(number, 64, scheduled_s=0.0) for number in (1, 2)]
        first = asyncio.create_task(stream_chat(http, server.api_url, payload, records[0]))
        while not records[0].chunk_times_s and not first.done():  # the first is streaming ...
            await asyncio.sleep(0.01)
        await stream_chat(http, server.api_url, payload, records[1])  # ... when the second arrives
        await first
    return records


def test_default_server_queues_so_both_overlapping_streams_finish(llamacpp_server: Server) -> None:
    """The kit's default is Ollama's (OLLAMA_NUM_PARALLEL=1): one slot, a request that arrives while another runs
    waits its turn, and neither is cut short."""
    assert "one request at a time, the others wait their turn" in llamacpp_server.up_output
    assert httpx.get(f"{llamacpp_server.base_url}/props", timeout=10).json()["total_slots"] == 1
    first, second = asyncio.run(_two_overlapping_streams(llamacpp_server))
    assert first.ok and second.ok, (first.to_dict(), second.to_dict())
    assert first.done_s is not None and second.first_token_s is not None
    assert second.first_token_s >= first.done_s - 0.05  # it waited for the first to end (timestamps in one loop)


def test_num_parallel_decodes_requests_together_and_reaches_the_recap() -> None:
    server = start_llamacpp(LLAMACPP_NUM_PARALLEL="2")
    try:
        assert "2 requests decoded together (LLAMACPP_NUM_PARALLEL" in server.up_output
        assert httpx.get(f"{server.base_url}/props", timeout=10).json()["total_slots"] == 2
        first, second = asyncio.run(_two_overlapping_streams(server))
        assert first.ok and second.ok and first.done_s is not None and second.first_token_s is not None
        assert second.first_token_s < first.done_s  # under way before the first ended
    finally:
        result = run_script("down.sh", server.env, timeout_s=120)
    assert result.returncode == 0 and f"port {server.port} is free" in result.stdout, result.stdout
    assert not (ROOT / ".kit" / "run" / f"llamacpp-{server.port}.pid").exists()


def test_a_port_in_use_gives_one_line_naming_a_free_one() -> None:
    port = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = run_script("up.sh", kit_env(ENGINES="llamacpp", LLAMACPP_PORT=str(port)), timeout_s=300)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"LLAMACPP_PORT={port} is invalid" in errors[0] and "already in use" in errors[0]


def test_down_for_vllm_only_leaves_llamacpp_running_and_says_so(llamacpp_server: Server) -> None:
    env = {**llamacpp_server.env, "ENGINES": "vllm", "VLLM_PORT": str(free_port())}
    result = run_script("down.sh", env, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"llama.cpp still runs on port {llamacpp_server.port}" in result.stdout
    assert "stop it with ENGINES=llamacpp bash down.sh" in result.stdout
    assert httpx.get(f"{llamacpp_server.api_url}/models", timeout=10).status_code == 200
