"""The text every setting is read from: the settings file (`.env`) merged under the process environment.

Precedence, lowest first: `.env` (or `.env.example` when there is no `.env`) < the process environment, exactly
as Docker Compose does, so `export VLLM_PORT=8010` retargets everything. `${VAR:-default}` references inside
`.env` are resolved with the environment winning too. The client reads it too, so it stands on the ground floor:
it imports nothing of the kit.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv.main import DotEnv

ROOT = Path(__file__).resolve().parents[1]  # the checkout
ENV_FILE = ROOT / ".env"
ENV_EXAMPLE = ROOT / ".env.example"
# The kit's engines' port settings, with their defaults and the engine each serves: the settings declare them
# (serve/config/settings.py), the client sends the kit's key only there (client/keys.py).
ENGINE_PORTS = {
    "VLLM_PORT": ("8009", "vllm"),
    "GPU_PORT": ("8000", "vllm"),
    "LLAMACPP_PORT": ("11434", "llamacpp"),
    "LLAMA_SERVER_PORT": ("8089", "llamaserver"),
}


def env_file() -> Path:
    """KIT_ENV_FILE if set (the tests point it at .env.example), else .env, else .env.example."""
    if os.environ.get("KIT_ENV_FILE"):
        return Path(os.environ["KIT_ENV_FILE"])
    return ENV_FILE if ENV_FILE.exists() else ENV_EXAMPLE


def load_env(path: Path | None = None) -> dict[str, str]:
    """`.env` merged under the process environment, with `${VAR:-default}` resolved env-first.

    python-dotenv's DotEnv with override=False is what resolves a reference env-first; its public dotenv_values
    resolves it file-first. DotEnv is not exported: pyproject.toml pins the releases this was tested on."""
    path = path or env_file()
    merged: dict[str, str] = {}
    if path.exists():
        values = DotEnv(path, interpolate=True, override=False).dict()
        merged.update({key: value for key, value in values.items() if value is not None})
    merged.update(os.environ)
    return merged
