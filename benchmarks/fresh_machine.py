"""A machine that never ran the kit, made on this one: a fresh clone of the work tree (what `git clone` gives: no
.venv, no .kit), a user's shell for it, pip without this machine's configuration, and a stand-in for PyTorch's CPU
wheel index on 127.0.0.1.

benchmarks.first_token builds its newcomer from these; the tests use them for their fresh clones too.

The stand-in index is a PEP 503 "simple" index that serves torch's wheel. The wheel is fetched once into
.kit/cache/torch-index/ the way this machine's pip gets it (from PyTorch's index where that is reachable, else
wherever the machine's pip configuration finds it); it is never committed.
"""

from __future__ import annotations

import hashlib
import html
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from serve.config.paths import ROOT
from serve.config.settings import CLIENT_VARIABLES, DEFAULT_TORCH_INDEX_URL, KNOBS
from serve.install.vllm_venv import TORCH_VERSION

DOWNLOAD_TIMEOUT_S = 1800  # torch's CPU wheel is ~200 MB
WHEEL_DIR = ROOT / ".kit" / "cache" / "torch-index"  # the stand-in index's wheels: downloaded once, never committed
# what a developer's shell may export that a user's clone must not see: its own .env decides
KIT_VARIABLES = {knob.env for knob in KNOBS} | {variable.env for variable in CLIENT_VARIABLES} | {"KIT_ENV_FILE"}


def fresh_clone(destination: Path, source: Path = ROOT) -> Path:
    """Copy a work tree's files (tracked and new, not ignored) to `destination`; return it."""
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    for name in filter(None, names):
        if (source / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, destination / name)
    return destination


def user_env(port: int) -> dict[str, str]:
    """A user's shell for a clone: none of the kit's variables, the native runtime on `port`."""
    env = {key: value for key, value in os.environ.items() if key not in KIT_VARIABLES}
    return {**env, "RUNTIME": "native", "VLLM_PORT": str(port)}


def stock_pip(env: dict[str, str], torch_index_url: str) -> dict[str, str]:
    """`env` without this machine's pip configuration (files and PIP_* variables; a PIP_CACHE_DIR stays):
    pip and uv reach PyPI alone, and torch comes from `torch_index_url`."""
    kept = {key: value for key, value in env.items() if not key.startswith("PIP_") or key == "PIP_CACHE_DIR"}
    return {**kept, "PIP_CONFIG_FILE": os.devnull, "TORCH_INDEX_URL": torch_index_url}


def downloaded_wheel(requirement: str, pattern: str, dest: Path, *pip_args: str) -> Path:
    """The wheel matching `pattern` in `dest`, fetched there first with this Python's pip if it is missing."""
    wheels = sorted(dest.glob(pattern))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps"]
            + ["--dest", str(dest), *pip_args, requirement],
            check=True,
            timeout=DOWNLOAD_TIMEOUT_S,
        )
        wheels = sorted(dest.glob(pattern))
    return wheels[-1]


def torch_wheel() -> Path:
    """torch's CPU wheel for this Python and machine, downloaded once."""
    return downloaded_wheel(
        f"torch=={TORCH_VERSION}",
        f"torch-{TORCH_VERSION}-*.whl",
        WHEEL_DIR,
        "--index-url",
        DEFAULT_TORCH_INDEX_URL,
        "--retries",
        "0",
    )


def write_index(root: Path, wheels: list[Path]) -> None:
    """root/simple/torch/index.html links each wheel (with its sha256, as real indexes do)."""
    project = root / "simple" / "torch"
    project.mkdir(parents=True, exist_ok=True)
    links = []
    for wheel in wheels:
        served = root / "files" / wheel.name
        served.parent.mkdir(parents=True, exist_ok=True)
        if not served.exists():
            served.symlink_to(wheel)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        links.append(f'<a href="../../files/{html.escape(wheel.name)}#sha256={digest}">{html.escape(wheel.name)}</a>')
    (project / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "<br>\n".join(links) + "\n</body></html>\n")


class _Handler(SimpleHTTPRequestHandler):
    requested: list[str]

    def log_message(self, format: str, *args: object) -> None:
        self.requested.append(self.path)


@contextmanager
def serve_index(root: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve `root` on 127.0.0.1; yields (the index URL, the paths requested so far)."""
    requested: list[str] = []
    handler = type("Handler", (_Handler,), {"requested": requested})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", requested
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def stock_pip_with_torch_index(env: dict[str, str], scratch: Path) -> Iterator[dict[str, str]]:
    """`env` as a user's machine has it (stock_pip), with torch's CPU wheel served from an index in `scratch` for as
    long as the block runs: PyPI hosts no +cpu torch, and PyTorch's own index is out of this machine's reach."""
    index = scratch / "torch-index"
    write_index(index, [torch_wheel()])
    with serve_index(index) as (url, _):
        yield stock_pip(env, url)
