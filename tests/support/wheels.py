"""Real wheels the tests need from the package registries, downloaded once into the ignored .kit/cache/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOWNLOAD_TIMEOUT_S = 1800  # torch's CPU wheel is ~200 MB


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
