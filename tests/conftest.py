"""The test harness: real servers started through the same scripts a user runs, stopped by the tests."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from serve.config.settings import BUNDLED_MODEL_NAME, KNOBS
from serve.processes.process import free_port, stop_group

ROOT = Path(__file__).resolve().parents[1]
MODEL = BUNDLED_MODEL_NAME
# The teaching engine's tests need torch, which only the vLLM venv has: this venv does not collect them, tests/run.sh
# runs them there first, and a run here whose paths hold them says so at its start and its end (not silently).
TORCH_TESTS = ROOT / "tests" / "labs" / "engine" / "needs_torch"
TORCH_TESTS_COMMAND = (
    ".kit/vllm/bin/python -m pytest tests/labs/engine/needs_torch --confcutdir=tests/labs/engine/needs_torch -q"
)
collect_ignore = [str(TORCH_TESTS.relative_to(ROOT / "tests"))]


def torch_tests_left_out(config: pytest.Config) -> str | None:
    """The line saying the teaching engine's tests are not in this run, when its paths include their folder."""
    start = config.invocation_params.dir
    paths = [(start / arg.split("::")[0]).resolve() for arg in config.args]
    if not any(TORCH_TESTS.is_relative_to(path) for path in paths):
        return None
    return (
        f"not collected: {TORCH_TESTS.relative_to(ROOT)} (the teaching engine's tests need torch, which only "
        f"the vLLM venv has; tests/run.sh runs them first; from the repository root: {TORCH_TESTS_COMMAND})"
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    line = torch_tests_left_out(config)
    return [line] if line else []


# Fixtures that start a real engine for the tests that ask: vLLM, llama.cpp's server, a Docker engine.
ENGINE_FIXTURES = frozenset({"vllm_server", "llamacpp_server", "docker_engine"})


# Modules whose tests start what tests/run.sh installs in the background: Open WebUI's venv (labs/webui.md).
LATE_MODULES = frozenset(
    {
        "tests/serve/webui/test_open_webui.py",  # Open WebUI started by up.sh
    }
)


def installed_in_background(item: pytest.Item) -> bool:
    return item.path.relative_to(ROOT).as_posix() in LATE_MODULES


def talks_to_a_server(item: pytest.Item) -> bool:
    return item.get_closest_marker("server") is not None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a real engine is a server test whatever its module says: `-m "not server"` leaves it
    out, and the mark cannot be forgotten. The modules whose tests start no server run first, while the session's
    vLLM starts beside them (pytest_collection_finish); the modules that need Open WebUI run last: on a bare machine
    tests/run.sh installs it (a download of hundreds of MB) in the background while the others run."""
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)
    # modules move whole (split, a module-scoped server would start twice): one test that starts a server makes its
    # module a server module, one that needs Open WebUI a late one
    late = {item.path for item in items if installed_in_background(item)}
    servers = {item.path for item in items if talks_to_a_server(item)}
    items.sort(key=lambda item: (item.path in late, item.path in servers))  # stable: each module keeps its order


def pytest_collection_finish(session: pytest.Session) -> None:
    """The session's vLLM starts now, in the background, when a test of this run asks for it: its first start on a
    machine compiles (minutes on two cores), the tests that start no server run meanwhile, on the other core."""
    if session.config.option.collectonly:
        return
    if any("vllm_server" in getattr(item, "fixturenames", ()) for item in session.items):
        _session_vllm.begin()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _session_vllm.abandon()


@pytest.hookimpl(trylast=True)  # after the durations, just above the short summary: seen with the results
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    line = torch_tests_left_out(config)
    if line:
        terminalreporter.write_line(line, yellow=True)


def kit_env(**overrides: str) -> dict[str, str]:
    """The process environment for a kit command: .env.example's defaults, RUNTIME=native, no serving while
    compiling, plus `overrides`.

    KIT_ENV_FILE keeps a developer's own .env out of the tests; variables a developer exported that
    the kit reads are dropped so that only `overrides` change the defaults. RUNTIME is native unless
    `overrides` name one: .env.example's auto would pick Docker wherever an engine happens to answer, so a
    test of auto (or of a Docker track) says so.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {knob.env for knob in KNOBS} | {"OPENAI_BASE_URL", "MODEL", "OPENAI_API_KEY"}
    }
    env["KIT_ENV_FILE"] = str(ROOT / ".env.example")
    env["RUNTIME"] = "native"
    # a start that compiles waits for the compiled engine, as the tests measure or read what it runs with; the
    # hand-over to it is tested on its own (tests/serve/engines/test_hand_over.py)
    env["SERVE_WHILE_COMPILING"] = "false"
    env.update(overrides)
    return env


def busiest_processes(lines: int = 24) -> str:
    """top's second frame: CPU use over the last second (steal time included) and the busiest processes."""
    try:
        frames = subprocess.run(
            ["top", "-b", "-n", "2", "-d", "1", "-o", "%CPU", "-c", "-w", "160"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:  # the timeout's own report matters more than this view
        return f"(no view of the machine: {exc})"
    return "\n".join(("top -" + frames.split("\ntop -")[-1]).splitlines()[:lines])


def run_bounded(
    argv: Sequence[str], env: dict[str, str] | None, timeout_s: float, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """subprocess.run for a command that starts children of its own (a shell's background clients, a benchmark's
    engines). It runs in its own process group; past `timeout_s` the whole group is stopped (SIGTERM, then
    SIGKILL) and the test fails with the output so far. subprocess.run would kill only the shell, and what the
    shell started would go on loading the machine for the tests after it."""
    process = subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        machine = busiest_processes()  # what it competed with, if anything, while it still runs
        stop_group(process.pid, grace_s=10)
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a child that left the group holds the pipes: give up on its output
            stdout, stderr = "", "(output lost: a process outside the group kept the pipes open)"
        pytest.fail(
            f"still running after {timeout_s:g} s, so its process group ({process.pid}) was stopped: "
            f"{shlex.join(argv)}\n--- stdout so far ---\n{stdout}\n--- stderr so far ---\n{stderr}\n"
            f"--- the machine at the timeout ---\n{machine}"
        )
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_script(script: str, env: dict[str, str], timeout_s: float = 1200) -> subprocess.CompletedProcess[str]:
    return run_bounded(["bash", str(ROOT / script)], env, timeout_s)


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


def bring_up(port: int, env: dict[str, str], what: str) -> Server:
    """`bash up.sh` with env; on any failure (a timeout included) `bash down.sh` stops what it started."""
    try:
        result = run_script("up.sh", env)
    except BaseException:
        run_script("down.sh", env, timeout_s=120)
        raise
    if result.returncode != 0:
        run_script("down.sh", env, timeout_s=120)
        pytest.fail(f"{what} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return Server(port, env, result.stdout + result.stderr)


def start_server(**overrides: str) -> Server:
    port = free_port()
    return bring_up(port, kit_env(VLLM_PORT=str(port), RUNTIME="native", **overrides), "up.sh")


def stop_server(server: Server) -> None:
    result = run_script("down.sh", server.env, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr


class BackgroundStart:
    """`bash up.sh` for the session's vLLM, begun at collection and taken by the fixture, which waits for it."""

    log = ROOT / ".kit" / "logs" / "test-run" / "session-vllm-up.log"  # up.sh's output: a file nobody reads till then

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def begin(self) -> None:
        self.env = kit_env(VLLM_PORT=str(free_port()), RUNTIME="native")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as output:  # up.sh keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                ["bash", str(ROOT / "up.sh")],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def take(self, timeout_s: float = 1200) -> Server:
        """The server it started (pytest.fail with up.sh's output if it did not start); `down.sh` is the taker's."""
        process, env = self.process, self.env
        self.process = None
        if process is None:
            return start_server()  # not begun: this run's collection did not ask for it
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(process.pid, grace_s=10)
            run_script("down.sh", env, timeout_s=120)
            pytest.fail(f"up.sh for the session's vLLM was still running after {timeout_s:g} s; its log: {self.log}")
        output = self.log.read_text(errors="replace")
        if process.returncode != 0:
            run_script("down.sh", env, timeout_s=120)
            pytest.fail(f"up.sh for the session's vLLM (begun at collection) failed ({process.returncode}):\n{output}")
        return Server(int(env["VLLM_PORT"]), env, output)

    def abandon(self) -> None:
        """A start no test took (the run was cut short): stopped, and down.sh, not left running."""
        if self.process is not None:
            stop_group(self.process.pid, grace_s=10)
            run_script("down.sh", self.env, timeout_s=120)
            self.process = None


_session_vllm = BackgroundStart()


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[Server]:
    """One real vLLM (native runtime, compiled, the kit's defaults) for the whole session, begun in the background
    as the session starts (pytest_collection_finish)."""
    server = _session_vllm.take()
    yield server
    stop_server(server)


LLAMACPP_MODEL = "smollm2:135m"  # the Ollama-style name the kit's llama.cpp server answers to


def start_llamacpp(**overrides: str) -> Server:
    """A real llama.cpp server (the Ollama-class engine) through `ENGINES=llamacpp bash up.sh`; seconds."""
    port = free_port()
    env = kit_env(ENGINES="llamacpp", LLAMACPP_PORT=str(port), VLLM_PORT=str(free_port()), **overrides)
    return bring_up(port, env, "ENGINES=llamacpp up.sh")


@pytest.fixture(scope="session")
def llamacpp_server() -> Iterator[Server]:
    """One real llama.cpp server (default settings: requests queue, as in Ollama) for the whole session."""
    server = start_llamacpp()
    yield server
    stop_server(server)
