"""Which engine the client talks to: two variables, read from the environment or `.env`."""

from __future__ import annotations

from dataclasses import dataclass

import openai

from serve.settings import api_key_for, load_env, refused_key_hint

DEFAULT_BASE_URL = "http://127.0.0.1:8009/v1"
NO_KEY = "EMPTY"  # the SDK insists on a key; engines without one ignore it


class EngineError(RuntimeError):
    """The engine cannot be used as configured; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Engine:
    base_url: str
    model: str
    api_key: str
    key_source: str = ""  # the variable the key came from ("" when none was set)

    @classmethod
    def from_env(cls) -> Engine:
        env = load_env()
        base_url = env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        key, source = api_key_for(base_url, env)
        return cls(base_url, env.get("MODEL") or env.get("MODEL_NAME", ""), key or NO_KEY, source)

    def client(self, timeout_s: float = 120.0) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=timeout_s, max_retries=0)


def explain(engine: Engine, exc: openai.OpenAIError) -> EngineError:
    """Turn an SDK exception into one line that says what is wrong and how to fix it."""
    if isinstance(exc, openai.APIConnectionError):
        return EngineError(f"cannot reach an engine at {engine.base_url} ({exc.__class__.__name__}). "
                           "Is it up? Start vLLM with `bash up.sh`, or point OPENAI_BASE_URL at a running engine")
    if isinstance(exc, openai.AuthenticationError):
        return EngineError(refused_key_hint(engine.base_url, engine.key_source))
    if isinstance(exc, openai.NotFoundError):
        served = served_models(engine)
        listing = ", ".join(served) if served else "(none listed)"
        return EngineError(f"MODEL={engine.model!r} is not served by {engine.base_url}; it serves: {listing}. "
                           "Set MODEL to one of them")
    if isinstance(exc, openai.APIStatusError):
        return EngineError(f"{engine.base_url} answered {exc.status_code}: {exc.message}")
    return EngineError(f"{engine.base_url}: {exc}")


def served_models(engine: Engine) -> list[str]:
    try:
        return [model.id for model in engine.client(timeout_s=10).models.list()]
    except openai.OpenAIError:
        return []
