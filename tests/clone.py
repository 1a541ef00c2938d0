"""A fresh clone of the working tree, as `git clone` would give it (no .venv, no .kit), and a free port.

Plain functions, no pytest: benchmarks/first_token.py uses them too.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from serve.settings import ROOT


def fresh_clone(destination: Path, source: Path = ROOT) -> Path:
    """Copy a work tree's files (tracked and new, not ignored) to `destination`; return it."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source, check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, names):
        if (source / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, destination / name)
    return destination


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
