"""A stand-in for PyTorch's CPU wheel index: a PEP 503 "simple" index on 127.0.0.1 that serves torch's wheel.

The wheel is fetched once into .kit/cache/torch-index/ the way this machine's pip gets it (from PyTorch's index
where that is reachable, else wherever the machine's pip configuration finds it); it is never committed.
"""

from __future__ import annotations

import hashlib
import html
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from serve.config.paths import ROOT
from serve.config.settings import DEFAULT_TORCH_INDEX_URL
from serve.install.vllm_venv import TORCH_VERSION
from tests.support.wheels import downloaded_wheel

WHEEL_DIR = ROOT / ".kit" / "cache" / "torch-index"


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
