"""llama.cpp's own C++ server as an engine: PyPI's prebuilt xllamacpp (nothing compiled), a real server with
parallel slots (it starts in seconds), its settings, and stopping it."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.arms import BUILTIN_ARMS, arm_settings
from client.stream import RequestRecord, chat_payload, stream_chat
from serve.config.settings import KNOBS, Settings
from serve.engines.llama_server import LlamaServerRuntime
from serve.install import llamacpp_venv
from serve.install.llamacpp_venv import XLLAMACPP_VERSION
from serve.install.venv import Venv
from serve.processes import process
from tests.conftest import LLAMACPP_MODEL, ROOT, free_port, kit_env, run_script
from tests.serve.install.test_system import path_without
from ui.values import SettingsError

pytestmark = [pytest.mark.server, pytest.mark.slow]
SLOTS = 3  # not the default (4): the server reporting 3 proves the setting reached it
DEFAULTS = {knob.env: knob.default for knob in KNOBS}
BUILD_TOOLS = ("gcc", "cc", "g++", "c++", "cmake", "make")  # what building llama.cpp would need


def settings(**overrides: str) -> Settings:
    return Settings.from_env({**DEFAULTS, "LLAMA_SERVER_PORT": str(free_port()), **overrides})


@pytest.fixture(scope="module")
def runtime() -> Iterator[LlamaServerRuntime]:
    started = LlamaServerRuntime(settings(LLAMA_SERVER_SLOTS=str(SLOTS)))
    started.start()
    yield started
    started.stop(quiet=True)


def api_url(runtime: LlamaServerRuntime) -> str:
    return f"{runtime.base_url}/v1"


def test_nothing_is_compiled_the_wheel_installs_on_a_path_without_compilers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyPI's xllamacpp is a prebuilt wheel: its install needs no C/C++ compiler, no CMake and no make, and builds
    nothing (the log has no build step)."""
    folder = tmp_path / "llamacpp"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=120)
    venv = Venv(folder, "llama.cpp", llamacpp_venv.VENV.holds, tmp_path / "install-llamacpp.log")
    monkeypatch.setattr(llamacpp_venv, "VENV", venv)
    monkeypatch.setenv("PATH", path_without(BUILD_TOOLS, tmp_path / "bin"))
    assert not any(shutil.which(tool) for tool in BUILD_TOOLS)
    assert llamacpp_venv.install() is True and venv.installed()
    log = venv.log_path.read_text()
    assert "xllamacpp" in log and "Building wheel" not in log and "Running setup.py" not in log, log
    check = subprocess.run(
        [str(venv.python), "-c", "import xllamacpp; print(xllamacpp.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0 and check.stdout.strip() == XLLAMACPP_VERSION, check.stderr
    assert llamacpp_venv.gguf_path().is_relative_to(folder)


def test_a_cpu_without_what_the_wheel_needs_is_refused_in_one_line() -> None:
    refusal = llamacpp_venv.cpu_refusal({"sse4_2", "avx", "f16c"}, "x86_64")
    assert (
        refusal is not None
        and "lacks AVX2, FMA" in refusal
        and "leave llamacpp and llamaserver out of ENGINES" in (refusal)
    )
    assert llamacpp_venv.cpu_refusal({"avx2", "fma", "f16c"}, "x86_64") is None
    assert llamacpp_venv.cpu_refusal(set(), "aarch64") is None


def test_both_engines_serve_prometheus_metrics(runtime: LlamaServerRuntime) -> None:
    """llama.cpp's server exports llamacpp:* metrics, which serve/observe/ scrapes; Ollama has none."""
    metrics = httpx.get(f"{runtime.base_url}/metrics", timeout=10)
    assert metrics.status_code == 200 and "llamacpp:prompt_tokens_total" in metrics.text, metrics.text[:300]


def test_it_answers_a_chat_completion_under_the_ollama_name(runtime: LlamaServerRuntime) -> None:
    models = httpx.get(f"{api_url(runtime)}/models", timeout=10).json()
    assert [model["id"] for model in models["data"]] == [LLAMACPP_MODEL]
    payload = {"model": LLAMACPP_MODEL, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 8}
    response = httpx.post(f"{api_url(runtime)}/chat/completions", json=payload, timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"].strip() and 0 < body["usage"]["completion_tokens"] <= 8


def test_the_slots_setting_reaches_the_server_with_a_full_context_each(runtime: LlamaServerRuntime) -> None:
    props = httpx.get(f"{runtime.base_url}/props", timeout=10).json()
    assert props["total_slots"] == SLOTS
    assert props["default_generation_settings"]["n_ctx"] == runtime.settings.max_model_len  # per slot


async def _streams(runtime: LlamaServerRuntime, count: int, max_tokens: int) -> list[RequestRecord]:
    prompt = [{"role": "user", "content": "Tell a long story about a cat."}]
    payload = {**chat_payload(LLAMACPP_MODEL, prompt, max_tokens), "ignore_eos": True}
    async with httpx.AsyncClient(timeout=120) as http:
        return await asyncio.gather(
            *(
                stream_chat(http, api_url(runtime), payload, RequestRecord(number, max_tokens, scheduled_s=0.0))
                for number in range(count)
            )
        )


def test_concurrent_streams_all_complete_decoded_together(runtime: LlamaServerRuntime) -> None:
    """More streams than slots: the slots decode together, the rest wait; none is cut short."""
    records = asyncio.run(_streams(runtime, SLOTS + 1, max_tokens=24))
    assert all(record.ok and record.output_tokens == 24 for record in records), [r.to_dict() for r in records]
    firsts = sorted(record.first_token_s for record in records if record.first_token_s is not None)
    lasts = sorted(record.done_s for record in records if record.done_s is not None)
    assert firsts[SLOTS - 1] < lasts[0]  # the first SLOTS answers were all under way before any finished


def test_the_key_guards_it_and_stays_off_the_command_line() -> None:
    key = "s3cret-llama"
    guarded = LlamaServerRuntime(settings(LLAMA_SERVER_SLOTS="1", VLLM_API_KEY=key))
    guarded.start()
    try:
        pid = guarded.running_pid()
        assert pid is not None and key not in process.cmdline(pid)
        url = f"{guarded.base_url}/v1/models"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
    finally:
        guarded.stop(quiet=True)


def test_stop_frees_the_port_and_removes_the_pidfile() -> None:
    own = LlamaServerRuntime(settings(LLAMA_SERVER_SLOTS="1"))
    own.start()
    assert own.healthy() and own.pidfile.path.exists()
    assert own.stop(quiet=True) is True
    assert process.port_is_free(own.settings.host, own.port) and not own.pidfile.path.exists()
    assert own.stop(quiet=True) is False  # twice is safe


@pytest.mark.parametrize("value", ["0", "-1", "two", "100000"])
def test_a_bad_slots_value_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(SettingsError, match=f"LLAMA_SERVER_SLOTS='{value}' is invalid: use a whole number"):
        settings(LLAMA_SERVER_SLOTS=value)
    result = subprocess.run(
        [sys.executable, "-m", "serve", "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=kit_env(ENGINES="llamaserver", LLAMA_SERVER_SLOTS=value),
        timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"error: LLAMA_SERVER_SLOTS='{value}' is invalid: use a whole number of parallel slots from 1 to 256, "
        "e.g. 4 (1 queues requests as Ollama does by default)"
    ]


def test_the_benchmark_arms_give_one_slot_and_a_slot_per_user() -> None:
    one, per_user = BUILTIN_ARMS["llamacpp"], BUILTIN_ARMS["llamaserver-n"]
    assert arm_settings(one.for_users(16)).llamacpp_num_parallel == 1
    assert arm_settings(per_user.for_users(16)).llama_server_slots == 16
    assert arm_settings(per_user.for_users(8)).llama_server_slots == 8
    assert (one.engine, per_user.engine) == ("llamacpp", "llamaserver")


def test_up_status_and_down_drive_it_through_engines() -> None:
    port = free_port()
    env = kit_env(
        ENGINES="llamaserver", LLAMA_SERVER_PORT=str(port), LLAMA_SERVER_SLOTS="2", VLLM_PORT=str(free_port())
    )
    try:
        up = run_script("up.sh", env, timeout_s=300)
        assert up.returncode == 0 and "llama-server is up" in up.stdout and "Starting vLLM" not in up.stdout, (
            up.stdout + up.stderr
        )
        status = subprocess.run(
            [sys.executable, "-m", "serve", "status"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        (line,) = [  # other engines of this checkout (the suite's shared ones) have rows of their own
            line for line in status.stdout.splitlines() if line.startswith("llama-server ") and f" {port} " in line
        ]
        cells = re.split(r"\s{3,}", line)  # the columns are as wide as the widest row's (other engines' too)
        assert status.returncode == 0 and cells[1:4] == [LLAMACPP_MODEL, "Q4_1 GGUF, 98 MB", str(port)], status.stdout
        assert httpx.get(f"http://127.0.0.1:{port}/props", timeout=10).json()["total_slots"] == 2
    finally:
        down = run_script("down.sh", env, timeout_s=120)
    assert down.returncode == 0 and f"port {port} is free" in down.stdout, down.stdout
    assert process.port_is_free("127.0.0.1", port)
