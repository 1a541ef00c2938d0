"""The learner's own Ollama on the kit's llama.cpp port: recognised, never fought, never stopped.

No registry this machine reaches ships Ollama: tests/support/ollama_standin.py answers as one (named a stand-in).
"""

from __future__ import annotations

import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from serve.engines.ollama import find
from serve.processes.process import port_is_free
from tests.conftest import ROOT, free_port, kit_env, run_script
from tests.support.ollama_standin import VERSION, ollama_standin

pytestmark = pytest.mark.slow


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    ("models", "model", "pull"),
    [(("smollm2:135m",), "smollm2:135m", False), (("qwen2.5:1.5b",), "qwen2.5:1.5b", True)],
)
def test_their_ollama_on_the_port_stops_up_before_anything_starts_with_the_lines_to_use_it(
    models: tuple[str, ...], model: str, pull: bool
) -> None:
    port, vllm_port = free_port(), free_port()
    env = kit_env(ENGINES="vllm,llamacpp", LLAMACPP_PORT=str(port), VLLM_PORT=str(vllm_port))
    with ollama_standin(port, models=models) as ollama:
        result = run_script("up.sh", env, timeout_s=300)
        still_theirs = httpx.get(f"{ollama}/api/version", timeout=5).json()  # nothing of theirs was stopped
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = errors(result.stderr)
    assert f"LLAMACPP_PORT={port} is held by your own Ollama {VERSION}" in line
    assert f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1 MODEL={model} .venv/bin/python -m client" in line
    assert ("ollama pull smollm2:135m" in line) is pull
    assert "LLAMACPP_PORT=" in line.split("beside it:")[1] and line.endswith("bash up.sh")
    assert still_theirs == {"version": VERSION}
    # vLLM came first in ENGINES, and it was not started: every preflight runs before the first start
    assert "Starting vLLM" not in result.stdout + result.stderr and port_is_free("127.0.0.1", vllm_port)
    assert not (ROOT / ".kit" / "run" / f"vllm-{vllm_port}.pid").exists()


def test_only_an_ollama_is_taken_for_one(tmp_path: Path) -> None:
    """Nothing listening, or a web server without Ollama's /api/version (a plain file server here), is no Ollama."""
    port = free_port()
    assert find(f"http://127.0.0.1:{port}") is None
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    with ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            assert find(f"http://127.0.0.1:{port}") is None
        finally:
            server.shutdown()
    with ollama_standin(port) as ollama:
        found = find(ollama)
    assert found is not None and found.version == VERSION and found.holds_same_model
