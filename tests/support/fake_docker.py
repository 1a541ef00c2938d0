"""A stand-in `docker` (with the Compose v2 plugin) for what a real engine cannot do on the test machines:
the GPU track's happy path (no GPU, no vllm/vllm-openai image) and the Ollama profile's (no ollama image),
and the v2 plugin's argv (Debian packages only Compose v1). Everything else runs on the real engine
(tests/serve/engines/test_docker_cpu.py, tests/serve/engines/test_docker_engine.py). It records every call (argv and
the variables compose would interpolate) and plays the engine's part just enough for the kit's control flow:

    info, compose version          answer like a working engine (info --format {{.NCPU}}: this machine's CPUs)
    ps -a --filter label=...       lists the stand-in container's service
    compose ... build|pull|up -d   succeed, or fail with the message in STATE/fail-<verb>
    compose ... up -d              starts a stand-in container: a tiny HTTP server on the published port
                                   that answers /health and writes vLLM-like log lines (or, with
                                   STATE/crash, only a traceback, then "exits")
    compose ... ps -q, inspect     report that container
    compose ... logs --follow      follows its log
    compose ... exec SERVICE ...   reports the command it would run
    compose ... down [--volumes]   stops it (so does compose ... rm --stop --force SERVICE)

STATE is the folder in FAKE_DOCKER_STATE. `install(bin_dir)` writes the executable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

RECORDED_PREFIXES = (
    "RESOLVED_",
    "CPU_IMAGE_TAG",
    "GPU_IMAGE",
    "MODEL_NAME",
    "VLLM_PORT",
    "GPU_PORT",
    "VLLM_HOST",
    "QUANTIZATION",
    "GPU_MEMORY_UTILIZATION",
    "MAX_MODEL_LEN",
    "SWAP_SPACE",
)
CONTAINER_ID = "f00dcafe1234"
STAND_IN_ENGINE = r'''
import http.server, sys, time
port, log = int(sys.argv[1]), sys.argv[2]
with open(log, "a") as out:
    out.write("INFO [api_server.py] vLLM API server version 0.9.1 (stand-in container)\n")
    out.write("INFO [executor_base.py] # cpu blocks: 1456, # CPU blocks: 0\n")
    out.write("INFO [executor_base.py] CPU KV cache size: 23,296 tokens\n")
    out.write("INFO [executor_base.py] Maximum concurrency for 1,024 tokens per request: 22.75x\n")
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
'''


def _state() -> Path:
    return Path(os.environ["FAKE_DOCKER_STATE"])


def _record(argv: list[str]) -> None:
    env = {key: value for key, value in os.environ.items() if key.startswith(RECORDED_PREFIXES)}
    with (_state() / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps({"argv": argv, "env": env}) + "\n")


def _engine_pid() -> int | None:
    try:
        pid = int((_state() / "container.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _fail_if_asked(verb: str) -> None:
    failure = _state() / f"fail-{verb}"
    if failure.exists():
        sys.stderr.write(failure.read_text())
        sys.exit(1)


def _up(service: str) -> None:
    log = _state() / "container.log"
    log.write_text("")
    (_state() / "container").write_text(service)
    if not service.startswith("vllm-"):
        return  # other services (ollama) only need to exist for ps/exec/down
    if (_state() / "crash").exists():
        log.write_text("Traceback (most recent call last):\nZeroDivisionError: integer division or modulo by zero\n")
        return
    port = os.environ["GPU_PORT"] if service == "vllm-gpu" else os.environ["VLLM_PORT"]
    engine = subprocess.Popen(
        [sys.executable, "-c", STAND_IN_ENGINE, port, str(log)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    (_state() / "container.pid").write_text(str(engine.pid))


def _down() -> None:
    pid = _engine_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)  # the kit then waits until the published port is free
    for name in ("container", "container.pid"):
        (_state() / name).unlink(missing_ok=True)


def compose(args: list[str]) -> None:
    verbs = [arg for arg in args if arg in ("version", "build", "pull", "up", "ps", "logs", "down", "rm", "exec")]
    verb = verbs[0] if verbs else ""
    service = args[-1]
    if verb == "version":
        print("Docker Compose version v2.29.7 (stand-in)")
    elif verb in ("build", "pull"):
        _fail_if_asked(verb)
        print(f"{verb} {service}: done (stand-in)")
    elif verb == "up":
        _fail_if_asked(verb)
        _up(service)
    elif verb == "ps":
        if (_state() / "container").exists():
            print(CONTAINER_ID)
    elif verb == "logs":
        os.execvp("tail", ["tail", "-n", "+1", "-f", str(_state() / "container.log")])
    elif verb in ("down", "rm"):
        _down()
    elif verb == "exec":
        print(f"ran {' '.join(args[args.index('exec') + 2 :])} in {args[args.index('exec') + 1]}: success (stand-in)")
    else:
        sys.exit(f"stand-in docker: unexpected compose call {args}")


def main(argv: list[str]) -> None:
    _record(argv)
    if argv[:1] == ["info"]:
        print(os.cpu_count() if "--format" in argv else "Server Version: 28.2.2 (stand-in)")
    elif argv[:2] == ["ps", "-a"]:
        container = _state() / "container"
        if container.exists():
            print(container.read_text())
    elif argv[:1] == ["compose"]:
        compose(argv[1:])
    elif argv[:1] == ["inspect"]:
        pid = _engine_pid()
        print(f"running {pid} 0" if pid is not None else "exited 0 0")  # status, pid, restarts
    else:
        sys.exit(f"stand-in docker: unexpected call {argv}")


def install(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from fake_docker import main\nmain(sys.argv[1:])\n"
    )
    docker.chmod(0o755)
    return docker


if __name__ == "__main__":
    main(sys.argv[1:])
