"""The test harness: real servers started through the same scripts a user runs, stopped by the tests."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from serve.settings import KNOBS

ROOT = Path(__file__).resolve().parents[1]
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
collect_ignore = ["engine"]  # the teaching engine's tests need torch: tests/run.sh runs them in .kit/vllm


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kit_env(**overrides: str) -> dict[str, str]:
    """The process environment for a kit command: .env.example's defaults plus `overrides`.

    KIT_ENV_FILE keeps a developer's own .env out of the tests; variables a developer exported that
    the kit reads are dropped so that only `overrides` change the defaults.
    """
    env = {key: value for key, value in os.environ.items()
           if key not in {knob.env for knob in KNOBS} | {"OPENAI_BASE_URL", "MODEL", "OPENAI_API_KEY"}}
    env["KIT_ENV_FILE"] = str(ROOT / ".env.example")
    env.update(overrides)
    return env


def run_script(script: str, env: dict[str, str], timeout_s: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / script)], env=env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT)


@dataclass(frozen=True)
class Server:
    port: int
    env: dict[str, str]
    up_output: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/v1"

    def client_env(self, **overrides: str) -> dict[str, str]:
        return {**self.env, "OPENAI_BASE_URL": self.api_url, "MODEL": MODEL, **overrides}


def start_server(**overrides: str) -> Server:
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native", **overrides)
    result = run_script("up.sh", env)
    if result.returncode != 0:
        run_script("down.sh", env)
        pytest.fail(f"up.sh failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return Server(port, env, result.stdout + result.stderr)


def stop_server(server: Server) -> None:
    result = run_script("down.sh", server.env, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[Server]:
    """One real vLLM (native runtime, compiled, the kit's defaults) for the whole session."""
    server = start_server()
    yield server
    stop_server(server)


LLAMACPP_MODEL = "smollm2:135m"  # the Ollama-style name the kit's llama.cpp server answers to


def start_llamacpp(**overrides: str) -> Server:
    """A real llama.cpp server (the Ollama-class engine) through `ENGINES=llamacpp bash up.sh`; seconds."""
    port = free_port()
    env = kit_env(ENGINES="llamacpp", LLAMACPP_PORT=str(port), VLLM_PORT=str(free_port()), **overrides)
    result = run_script("up.sh", env, timeout_s=1200)
    if result.returncode != 0:
        run_script("down.sh", env)
        pytest.fail(f"ENGINES=llamacpp up.sh failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return Server(port, env, result.stdout + result.stderr)


@pytest.fixture(scope="session")
def llamacpp_server() -> Iterator[Server]:
    """One real llama.cpp server (default settings: interrupt_requests on) for the whole session."""
    server = start_llamacpp()
    yield server
    stop_server(server)
