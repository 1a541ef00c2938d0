"""What one check gets and gives: a `Probe` of one engine (the stock OpenAI SDK and raw HTTP, both tiny requests)
and a `CheckRecord` (the verdict and the evidence a reader needs to believe it).

A verdict is one of four: PASS (answered as the OpenAI contract says), DIFFERS (answered, but not as the
contract says: a parameter ignored, a refusal, another status or error shape), FAIL (no usable answer: a 5xx,
a traceback, no connection) and NOT_APPLICABLE (the check needs something this run does not have: a key).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx
from openai import OpenAI

from client.endpoint import Endpoint

MAX_TOKENS = 8  # every check's answer is this short, so that the whole matrix on one engine takes seconds
REQUEST_TIMEOUT_S = 60.0
CHAT_PROMPT = "Say OK."
TEXT_PROMPT = "The capital of France is"
TRACEBACK = "Traceback (most recent call last)"


class Verdict(Enum):
    PASS = "pass"
    DIFFERS = "differs"
    FAIL = "fail"
    NOT_APPLICABLE = "n/a"

    @property
    def mark(self) -> str:
        """How the matrix shows it."""
        return {"pass": "✔", "fail": "✘"}.get(self.value, self.value)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a check function returns: its verdict and the evidence (what was sent back, in a line)."""

    verdict: Verdict
    evidence: str


def passed(evidence: str) -> Outcome:
    return Outcome(Verdict.PASS, evidence)


def differs(evidence: str) -> Outcome:
    return Outcome(Verdict.DIFFERS, evidence)


def failed(evidence: str) -> Outcome:
    return Outcome(Verdict.FAIL, evidence)


def expect(condition: bool, evidence: str) -> Outcome:
    """PASS when the contract holds, DIFFERS otherwise; the same evidence either way."""
    return Outcome(Verdict.PASS if condition else Verdict.DIFFERS, evidence)


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One check on one engine, as the results file keeps it."""

    check: str
    engine: str
    verdict: Verdict
    evidence: str
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "engine": self.engine,
            "verdict": self.verdict.value,
            "evidence": self.evidence,
            "duration_s": round(self.duration_s, 3),
        }


@dataclass(slots=True)
class Probe:
    """One engine as the checks talk to it: `sdk` (the stock OpenAI client, no retries) and `http` (raw)."""

    endpoint: Endpoint
    sdk: OpenAI
    http: httpx.Client
    max_model_len: int | None = None  # from /v1/models where the engine lists it (vLLM, the teaching engine)

    @classmethod
    def open(cls, endpoint: Endpoint, timeout_s: float = REQUEST_TIMEOUT_S) -> Probe:
        sdk = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key or "none", max_retries=0, timeout=timeout_s)
        return cls(endpoint, sdk, httpx.Client(timeout=timeout_s))

    def close(self) -> None:
        self.sdk.close()
        self.http.close()

    @property
    def model(self) -> str:
        return self.endpoint.model

    def chat(self, content: str = CHAT_PROMPT, **params: Any) -> Any:
        """A non-streamed chat completion through the SDK: temperature 0 and MAX_TOKENS unless `params` say."""
        return self.sdk.chat.completions.create(
            **{
                "model": self.model,
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
                "messages": [{"role": "user", "content": content}],
                **params,
            }
        )

    def complete(self, prompt: str = TEXT_PROMPT, **params: Any) -> Any:
        return self.sdk.completions.create(
            **{"model": self.model, "max_tokens": MAX_TOKENS, "temperature": 0, "prompt": prompt, **params}
        )

    def post(
        self,
        path: str,
        body: dict[str, Any] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """Raw HTTP where the SDK hides the wire (status codes, error bodies); the endpoint's key unless `headers`."""
        # a fresh connection each time: a server that answered the last one with a 500 may have closed it
        sent = {**(self.endpoint.headers if headers is None else headers), "Connection": "close"}
        if content is not None:
            return self.http.post(
                f"{self.endpoint.base_url}{path}", content=content, headers={**sent, "Content-Type": "application/json"}
            )
        return self.http.post(f"{self.endpoint.base_url}{path}", json=body, headers=sent)


Check = Callable[[Probe], Outcome]


def short(value: object, limit: int = 160) -> str:
    """A value as evidence: JSON where it can, cut to one short line."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
