"""A fresh clone of the working tree, as `git clone` would give it (no .venv, no .kit), and a user's environment
for it.

Plain functions, no pytest: benchmarks.first_token uses them too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from serve.config.paths import ROOT
from serve.config.settings import CLIENT_VARIABLES, KNOBS

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
