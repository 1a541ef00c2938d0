"""Which Compose drives the Docker tracks, and the project its containers belong to.

Both Compose v2 (the `docker compose` plugin) and v1 (`docker-compose` >= 1.28, the first with profiles) are
driven with the same arguments: Debian 12 and Ubuntu 22.04 package only v1, and Docker Desktop ships only v2.
The plugin is preferred when both answer. The project name (`-p`) is the folder's name plus a hash of its path,
so two clones never share containers or the model-cache volume, even in folders with the same name.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from serve.config.paths import ROOT

PROBE_TIMEOUT_S = 15
V1_MIN_VERSION = (1, 28)  # profiles (the gpu and ollama tracks) arrived in docker-compose 1.28
VERSION = re.compile(r"v?(\d+)\.(\d+)\.\d+")  # "Docker Compose version v2.29.7", "docker-compose version 1.29.2, build"


class ComposeUnavailable(Exception):
    """Neither Compose answers usefully; the message says what was tried and what failed."""


@dataclass(frozen=True, slots=True)
class Compose:
    argv: tuple[str, ...]  # ("docker", "compose") or ("docker-compose",)
    version: str

    @property
    def label(self) -> str:
        return f"{' '.join(self.argv)} {self.version}"

    @property
    def build_flags(self) -> tuple[str, ...]:
        """v1 builds with Docker's classic builder, which keeps a failed step's container unless told not to;
        v2 builds with BuildKit, which keeps none (and has no such flag)."""
        return ("--force-rm",) if self.version.split(".")[0] == "1" else ()


def _probe(argv: list[str]) -> tuple[str, tuple[int, int]]:
    """`argv version` -> ('2.29.7', (2, 29)); ComposeUnavailable saying why when it does not answer."""
    try:
        result = subprocess.run([*argv, "version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ComposeUnavailable(f"`{' '.join(argv)} version` did not answer in {PROBE_TIMEOUT_S} s") from None
    match = VERSION.search(result.stdout)
    if result.returncode != 0 or match is None:
        first = (result.stderr or result.stdout).strip().splitlines()[:1]
        raise ComposeUnavailable(
            f"`{' '.join(argv)} version` failed ({first[0] if first else f'exit {result.returncode}'})"
        )
    return match.group(0).removeprefix("v"), (int(match.group(1)), int(match.group(2)))


def find(docker: str) -> Compose:
    """The v2 plugin if `docker compose version` answers, else docker-compose >= 1.28; else ComposeUnavailable."""
    try:
        return Compose((docker, "compose"), _probe([docker, "compose"])[0])
    except ComposeUnavailable as exc:
        plugin_failure = str(exc)
    standalone = shutil.which("docker-compose")
    if standalone is None:
        raise ComposeUnavailable(f"{plugin_failure}, and docker-compose is not installed")
    try:
        version, major_minor = _probe([standalone])
    except ComposeUnavailable as exc:
        raise ComposeUnavailable(f"{plugin_failure}, and {exc}") from None
    if major_minor < V1_MIN_VERSION:
        raise ComposeUnavailable(
            f"{plugin_failure}, and docker-compose is {version}: the kit needs 1.28 or newer "
            "(profiles); install the compose plugin or a newer docker-compose"
        )
    return Compose((standalone,), version)


def project_name(root: Path = ROOT) -> str:
    """`<folder>-<8 hex of its path>`: unique per clone, readable in `docker ps` and volume names."""
    folder = re.sub(r"[^a-z0-9_-]", "", root.name.lower()).lstrip("-_") or "vllm-lab-kit"
    return f"{folder}-{hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:8]}"
