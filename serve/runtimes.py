"""Which runtime serves: RUNTIME=auto picks Docker only when an engine with compose answers."""

from __future__ import annotations

import shutil
import subprocess

from serve.native import NativeRuntime
from serve.settings import Settings, SettingsError

DOCKER_PROBE_TIMEOUT_S = 15


def docker_unusable_reason() -> str | None:
    """None when `docker info` and `docker compose version` both succeed, else what failed."""
    docker = shutil.which("docker")
    if docker is None:
        return "the docker command is not installed"
    for probe in (["info"], ["compose", "version"]):
        try:
            result = subprocess.run([docker, *probe], capture_output=True, text=True,
                                    timeout=DOCKER_PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"`docker {' '.join(probe)}` did not answer in {DOCKER_PROBE_TIMEOUT_S} s"
        if result.returncode != 0:
            first = (result.stderr or result.stdout).strip().splitlines()[:1]
            return f"`docker {' '.join(probe)}` failed ({first[0] if first else f'exit {result.returncode}'})"
    return None


def select(settings: Settings) -> NativeRuntime:
    if settings.runtime == "native":
        return NativeRuntime(settings)
    reason = docker_unusable_reason()
    if settings.runtime == "auto":
        if reason is not None:
            return NativeRuntime(settings)
        raise SettingsError("RUNTIME=auto found a Docker engine, but this version of the kit has no Docker "
                            "runtime yet; set RUNTIME=native")
    if reason is not None:
        raise SettingsError(f"RUNTIME={settings.runtime} is invalid here: it needs a Docker engine with the "
                            f"compose plugin, and {reason}. Start Docker, or set RUNTIME=native")
    raise SettingsError(f"RUNTIME={settings.runtime}: this version of the kit has no Docker runtime yet; "
                        "set RUNTIME=native")
