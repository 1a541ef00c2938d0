"""PyPI's prebuilt llama.cpp server (xllamacpp, what the kit's llama.cpp engines run) against a llama-server built
from source, side by side in one run: the same GGUF, the same options, rounds alternating at each load point.

    .venv/bin/python -m benchmarks.llamacpp_wheel --llama-server PATH [--slots 1,16] [--concurrency 1,4,16]

It builds nothing: PATH is a `llama-server` you built yourself (llama.cpp's README: `cmake -B build` then
`cmake --build build --target llama-server`), the peer a user who compiles would pick. For each slot count both
servers start on free ports with that many slots (`--parallel`), MAX_MODEL_LEN tokens of context each, the kit's
threads, and benchmarks.kit_vs_defaults measures them attached, the source build as the baseline: its closed-loop
workload, its rounds, its settling pause. One results file holds every slot count, with the machine and both
builds' system info.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks import kit_vs_defaults
from benchmarks.arms import guarded
from labs.results import Envelope, MeasuredEngine, command_line, write
from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.engines.llama_server import LlamaServerRuntime
from serve.engines.llamacpp import MODEL_ALIAS, SERVER_SCRIPT
from serve.install import llamacpp_venv
from serve.processes.health import is_healthy
from serve.processes.process import free_port
from ui.cli import KitArgumentParser, positive_int, positive_ints
from ui.environment import load_env
from ui.progress import StepFailed, console

DEFAULT_SLOTS = "1,16"
DEFAULT_CONCURRENCY = "1,4,16"
DEFAULT_ROUNDS = 3
DEFAULT_LENGTHS = "fixed:64"
DEFAULT_OUT = ROOT / "results" / "llamacpp_wheel"
START_TIMEOUT_S = 60.0
HOST = "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    parser = KitArgumentParser(
        prog="python -m benchmarks.llamacpp_wheel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--llama-server", type=Path, required=True, help="a llama-server built from source")
    parser.add_argument("--slots", type=positive_ints, default=positive_ints(DEFAULT_SLOTS))
    parser.add_argument("--concurrency", type=positive_ints, default=positive_ints(DEFAULT_CONCURRENCY))
    parser.add_argument("--rounds", type=positive_int, default=DEFAULT_ROUNDS)
    parser.add_argument("--lengths", default=DEFAULT_LENGTHS, help="output lengths: fixed:64, uniform:48-80")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json")
    return parser


def server_options(port: int, slots: int) -> list[str]:
    """The options both builds get: the kit's llama-server engine's (.env's settings), on `port` with `slots` slots."""
    overrides = {"LLAMA_SERVER_PORT": str(port), "LLAMA_SERVER_SLOTS": str(slots), "VLLM_HOST": HOST}
    runtime = LlamaServerRuntime(Settings.from_env({**load_env(), **overrides}))
    return runtime.server_options(runtime.threads())


@contextmanager
def running(name: str, argv: list[str], port: int, log: Path) -> Iterator[str]:
    """The server, healthy, for the block; its /v1 URL. Stopped on the way out."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not is_healthy(url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise StepFailed(f"{name} did not answer /health in {START_TIMEOUT_S:.0f} s; see {log}")
            time.sleep(0.3)
        yield f"{url}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)


def measure_slots(args: argparse.Namespace, slots: int) -> dict[str, Any]:
    """Both builds up with `slots` slots, measured side by side by kit_vs_defaults (the source build the baseline)."""
    ports = {"source": free_port(), "wheel": free_port()}
    commands = {
        "source": [str(args.llama_server), *server_options(ports["source"], slots)],
        "wheel": [
            str(llamacpp_venv.VENV.python),
            str(SERVER_SCRIPT),
            *server_options(ports["wheel"], slots),
        ],
    }
    with ExitStack() as stack:
        urls = {
            name: stack.enter_context(running(name, argv, ports[name], args.out / f"{name}-{slots}.log"))
            for name, argv in commands.items()
        }
        attach = [f"{name}-{slots}:llamaserver={url}" for name, url in urls.items()]
        measured = [
            "--concurrency",
            ",".join(map(str, args.concurrency)),
            "--rounds",
            str(args.rounds),
            "--lengths",
            args.lengths,
            "--restarts",
            "0",
        ]
        inner = kit_vs_defaults.build_parser().parse_args([*(f"--attach={item}" for item in attach), *measured])
        report = kit_vs_defaults.run(inner)
    report["commands"] = {name: [portable(arg) for arg in argv] for name, argv in commands.items()}
    return report


def portable(arg: str) -> str:
    """An argument as a results file keeps it: the checkout's paths relative to it, the home folder as ~."""
    return arg.replace(f"{ROOT}/", "").replace(str(Path.home()), "~")


def run(args: argparse.Namespace) -> dict[str, Any]:
    if not args.llama_server.is_file():
        raise ValueError(f"--llama-server {args.llama_server} is not a file: give the path of a llama-server you built")
    llamacpp_venv.install()
    version = subprocess.run([str(args.llama_server), "--version"], capture_output=True, text=True, timeout=60)
    builds = {
        "source": " ".join((version.stdout + version.stderr).split()),
        "wheel": f"xllamacpp {llamacpp_venv.XLLAMACPP_VERSION} (llama.cpp {llamacpp_venv.LLAMACPP_BUILD})",
    }
    by_slots = {}
    for slots in args.slots:
        console.print(f"[bold]{slots} slot(s)[/bold]: the source build and the wheel, rounds alternating")
        by_slots[str(slots)] = measure_slots(args, slots)
    wheel_over_source = {
        slots: {
            users: (1 / ratio if ratio else None)
            for users, ratio in report["comparisons"]["output_tokens_per_s_ratio"][f"wheel-{slots}"].items()
        }
        for slots, report in by_slots.items()
    }
    return {"builds": builds, "wheel_over_source": wheel_over_source, "by_slots": by_slots}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = guarded(lambda: run(args))
    engines = [
        MeasuredEngine(MODEL_ALIAS, f"http://{HOST}", "llamaserver", version) for version in report["builds"].values()
    ]
    command = command_line("python -m benchmarks.llamacpp_wheel", sys.argv[1:] if argv is None else argv)
    write(args.out / "results.json", Envelope.now(command, engines), report)
    for slots, ratios in report["wheel_over_source"].items():
        shown = ", ".join(f"{users} users {ratio:.2f}x" for users, ratio in ratios.items() if ratio is not None)
        console.print(f"the wheel's output tok/s over the source build's, {slots} slot(s): {shown}")
    console.print(f"Wrote {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
