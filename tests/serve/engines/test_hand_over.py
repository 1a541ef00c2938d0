"""Serving while compiling (SERVE_WHILE_COMPILING): an eager vLLM answers, the compiled one takes its port over
without a failed request or a cut stream (serve/engines/hand_over.py, serve/engine_plugins/kit_shared_port.py)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from serve.config.machine import detect
from serve.config.plan import ServingEarly, resolve_serve_while_compiling
from serve.config.sizing import GiB
from serve.config.vllm_flags import API_SERVER_MODULE
from serve.engines import hand_over
from serve.processes import process
from serve.processes.local_server import RUN_DIR
from tests.conftest import MODEL, ROOT, Server, free_port, kit_env, run_script

ENGINE_PLUGINS = ROOT / "serve" / "engine_plugins"


def decision(setting: bool | None, **overrides: object) -> ServingEarly:
    facts: dict[str, object] = {
        "eager": False,
        "replica": False,
        "compiled_before": False,
        "engine_bytes": GiB,
        "whole": detect(),
    }
    facts.update(overrides)
    return resolve_serve_while_compiling(setting, **facts)  # type: ignore[arg-type]


def test_auto_serves_early_only_when_the_start_compiles_and_two_engines_fit() -> None:
    assert decision(None).serve_eager_first
    assert "never started compiled" in decision(None).reason
    assert not decision(None, compiled_before=True).serve_eager_first
    assert decision(True, compiled_before=True).serve_eager_first  # true: at every compiled start
    assert not decision(False).serve_eager_first
    assert not decision(True, eager=True).serve_eager_first  # nothing compiles
    assert "router" in decision(True, replica=True).reason  # a replica never does
    too_big = decision(True, engine_bytes=detect().memory_available_bytes)
    assert not too_big.serve_eager_first and "GiB is available" in too_big.reason


def test_the_compile_key_ignores_where_it_listens_and_follows_what_it_compiles() -> None:
    argv = ["python", "-m", API_SERVER_MODULE, "--model", "m", "--host", "127.0.0.1", "--port", "8009"]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "/usr/bin", "VLLM_API_KEY": "k"}
    key = hand_over.compile_key(argv, env)
    assert hand_over.compile_key([*argv[:-1], "8010"], {**env, "PATH": "/bin", "VLLM_API_KEY": "j"}) == key
    assert hand_over.compile_key([*argv, "--enforce-eager"], env) != key
    assert hand_over.compile_key(argv, {**env, "VLLM_CPU_KVCACHE_SPACE": "2"}) != key
    assert hand_over.compile_key(argv, {**env, "ATEN_CPU_CAPABILITY": "avx2"}) != key


def listener(port: int, first: bool) -> socket.socket:
    sys.path.insert(0, str(ENGINE_PLUGINS))
    try:
        from kit_shared_port import steer_to_successor
    finally:
        sys.path.remove(str(ENGINE_PLUGINS))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as vLLM's create_server_socket
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    if first:
        steer_to_successor(sock)
    sock.setblocking(False)
    return sock


def accepted_by(socks: dict[str, socket.socket], port: int, connections: int = 12) -> dict[str, int]:
    counts = dict.fromkeys(socks, 0)
    for _ in range(connections):
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            time.sleep(0.01)
            for name, sock in socks.items():
                try:
                    sock.accept()[0].close()
                    counts[name] += 1
                except OSError:  # nothing queued there, or not listening
                    pass
    return counts


def test_the_kernel_sends_every_new_connection_to_the_second_listener_once_it_listens() -> None:
    """The real kernel, the kit's own BPF program: while the successor is only bound (vLLM binds before its engine is
    ready) the first server gets every connection; once the successor listens, the successor gets every one."""
    port = free_port()
    first, second = listener(port, first=True), listener(port, first=False)
    try:
        first.listen(16)
        assert accepted_by({"first": first, "second": second}, port) == {"first": 12, "second": 0}
        second.listen(16)
        assert accepted_by({"first": first, "second": second}, port) == {"first": 0, "second": 12}
    finally:
        first.close()
        second.close()


class Streams:
    """Clients streaming chat completions, each through its kept-alive connection as the OpenAI SDK does (but with
    no retry: a reset is a failure here), until told to stop: each answer must end with [DONE]."""

    def __init__(self, url: str, clients: int = 2) -> None:
        self.url, self.done, self.failures = url, [], []  # type: ignore[var-annotated]
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(clients)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=130)

    def run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 24}
        with httpx.Client(timeout=120) as client:
            while not self.stopping.is_set():
                try:
                    with client.stream("POST", self.url, json={**body, "stream": True}) as answer:
                        answer.raise_for_status()
                        lines = list(answer.iter_lines())
                    if "data: [DONE]" not in lines:
                        raise RuntimeError(f"stream cut: {lines[-3:]}")
                    self.done.append(time.monotonic())
                except Exception as exc:  # every failure is the finding
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.5)


@pytest.mark.server
@pytest.mark.slow
def test_up_serves_an_eager_engine_and_the_compiled_one_takes_the_port_over_without_a_failed_request(
    vllm_server: Server,
) -> None:
    """The session's server compiled the kit's defaults, so the compiled engine here loads them (seconds, not
    minutes): SERVE_WHILE_COMPILING=true asks for the hand-over all the same."""
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), SERVE_WHILE_COMPILING="true")
    eager_pidfile = hand_over.eager_pidfile(port, API_SERVER_MODULE)
    streams = Streams(f"http://127.0.0.1:{port}/v1/chat/completions")
    try:
        up = run_script("up.sh", env, timeout_s=900)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "Serving while compiling: SERVE_WHILE_COMPILING=true" in up.stdout, up.stdout
        eager_group = eager_pidfile.live_group()
        assert eager_group is not None, "up returned without the eager engine answering"
        streams.start()
        status = subprocess.run(
            [sys.executable, "-m", "serve", "status"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert "vLLM (eager) answers on port" in status.stdout, status.stdout + status.stderr
        deadline = time.monotonic() + 600
        while eager_pidfile.live_group() is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        took_over = time.monotonic()
        assert eager_pidfile.live_group() is None, "the compiled engine never took the port over"
        while len([at for at in streams.done if at > took_over]) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        streams.stop()
        record = json.loads((RUN_DIR / f"vllm-{port}.events.json").read_text())
        compiled_pid = process.PidFile(RUN_DIR / f"vllm-{port}.pid", API_SERVER_MODULE).live_pid()
    finally:
        streams.stopping.set()
        down = run_script("down.sh", env, timeout_s=180)
    assert streams.failures == [], streams.failures
    assert len([at for at in streams.done if at < took_over]) >= 1, "no answer came from the eager engine"
    assert len([at for at in streams.done if at > took_over]) >= 3, "no answer came from the compiled engine"
    took = [event for event in record["events"] if event["kind"] == "took-over"]
    assert len(took) == 1 and "no request cut" in took[0]["note"], record
    assert process.group_members(eager_group) == [] and not eager_pidfile.path.exists()
    assert not Path(str(eager_pidfile.path).replace(".pid", ".events.json")).exists()
    log = (ROOT / ".kit" / "logs" / f"vllm-{port}.log").read_text(errors="replace")
    assert "Directly load AOT compilation" in log, log[-3000:]  # it is the compiled engine that took over
    eager_log = (ROOT / ".kit" / "logs" / f"vllm-eager-{port}.log").read_text(errors="replace")
    assert "each answer now closes its connection" in eager_log, eager_log[-3000:]  # told, and it heard
    assert compiled_pid is not None and down.returncode == 0, down.stdout + down.stderr
    assert process.group_members(compiled_pid) == [] and process.port_is_free("127.0.0.1", port)


@pytest.mark.server
@pytest.mark.slow
def test_down_during_the_hand_over_stops_both_engines_and_frees_the_port(vllm_server: Server) -> None:
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), SERVE_WHILE_COMPILING="true")
    eager_pidfile = hand_over.eager_pidfile(port, API_SERVER_MODULE)
    compiled_pidfile = process.PidFile(RUN_DIR / f"vllm-{port}.pid", API_SERVER_MODULE)
    try:
        up = run_script("up.sh", env, timeout_s=900)
        eager, compiled = eager_pidfile.live_group(), compiled_pidfile.live_group()
    finally:
        down = run_script("down.sh", env, timeout_s=180)
    assert up.returncode == 0 and "Serving while compiling" in up.stdout, up.stdout + up.stderr
    assert eager is not None and compiled is not None, "up returned without both engines running"
    assert down.returncode == 0, down.stdout + down.stderr
    assert "vLLM (eager)" in down.stdout and f"port {port} is free" in down.stdout, down.stdout
    assert process.group_members(eager) == [] and process.group_members(compiled) == []
    assert not eager_pidfile.path.exists() and not compiled_pidfile.path.exists()
    assert process.port_is_free("127.0.0.1", port)


LINKED_NAME = "learner/float-model"


@pytest.mark.server
@pytest.mark.slow
def test_the_eager_engine_serves_the_float_weights_while_the_int8_ones_are_made(tmp_path: Path) -> None:
    """A first start (no int8 checkpoint yet) answers from the float weights: the int8 checkpoint, which the compiled
    engine serves, is made while the eager engine answers, not before it. A model folder the machine never quantized
    (MODEL_PATH, a link to the bundled checkpoint) and an empty kit cache make it a first start."""
    from serve.config.model import MODEL_DIR

    model = tmp_path / "float-model"
    model.symlink_to(MODEL_DIR)
    port = free_port()
    env = kit_env(
        VLLM_PORT=str(port),
        SERVE_WHILE_COMPILING="true",
        QUANTIZATION="int8",
        MODEL_PATH=str(model),
        MODEL_NAME=LINKED_NAME,  # a model folder of one's own is served under a name of its own
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    try:
        up = run_script("up.sh", env, timeout_s=900)
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": LINKED_NAME, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 4},
            timeout=120,
        )
    finally:
        down = run_script("down.sh", env, timeout_s=180)
    output = up.stdout + up.stderr
    assert up.returncode == 0 and answer.status_code == 200, output + answer.text
    said = output.index("The eager engine serves the float weights; the int8 ones are made meanwhile")
    assert output.index("Quantizing") > said, output  # the int8 checkpoint after the eager engine, not before
    eager_log = (ROOT / ".kit" / "logs" / f"vllm-eager-{port}.log").read_text(errors="replace")
    served = re.search(r"█  model +(\S+)", eager_log)  # vLLM's banner names the folder it serves
    assert served is not None and Path(served[1]).resolve() == MODEL_DIR.resolve(), eager_log[:3000]  # the float one
    int8 = list((tmp_path / "cache" / "vllm-lab-kit" / "models" / "int8").glob("*-int8-w8a8"))
    assert len(int8) == 1 and (int8[0] / "config.json").exists(), int8
    assert down.returncode == 0 and process.port_is_free("127.0.0.1", port), down.stdout + down.stderr
