"""The learner's own Ollama: recognised where it answers, never fought and never stopped.

Ollama answers `GET /api/version` ({"version": "0.12.3"}) and lists the models it holds at `GET /api/tags`; its
OpenAI-compatible API is `/v1` on the same port (11434 by default, the port the kit's llama.cpp server takes).
When `up` finds one holding LLAMACPP_PORT, it starts nothing and says how to use it, or how to run the kit's
llama.cpp beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

PROBE_TIMEOUT_S = 2.0
SAME_MODEL = "smollm2:135m"  # Ollama's name for the model the kit serves: `ollama pull smollm2:135m`


@dataclass(frozen=True, slots=True)
class Ollama:
    """An Ollama that answered: where, which version, and the models it holds (their Ollama names)."""

    base_url: str  # http://host:port, without /v1
    version: str
    models: tuple[str, ...]

    @property
    def api_url(self) -> str:
        """Its OpenAI-compatible API, as a client's OPENAI_BASE_URL takes it."""
        return f"{self.base_url}/v1"

    @property
    def holds_same_model(self) -> bool:
        return SAME_MODEL in self.models


def find(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> Ollama | None:
    """The Ollama answering at `base_url`, or None when nothing does or what answers is not Ollama."""
    try:
        with httpx.Client(timeout=timeout_s) as http:
            version = http.get(f"{base_url}/api/version").raise_for_status().json()["version"]
            tags = http.get(f"{base_url}/api/tags").raise_for_status().json().get("models", [])
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(version, str):
        return None
    names = tuple(model["name"] for model in tags if isinstance(model, dict) and isinstance(model.get("name"), str))
    return Ollama(base_url, version, names)
