"""The checks of errors: a bad request must get the status the OpenAI SDK maps to its exceptions (404
NotFoundError, 400 BadRequestError, 401 AuthenticationError) and an OpenAI error object,
`{"error": {"message", "type", "param", "code"}}`, whose message names what was wrong. Never a 5xx or a traceback.

Sent as raw HTTP: the SDK would turn every one of these into an exception and hide the body's shape.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from labs.contract.probe import (
    CHAT_PROMPT,
    MAX_TOKENS,
    TRACEBACK,
    Outcome,
    Probe,
    Verdict,
    differs,
    failed,
    passed,
    short,
)

UNKNOWN_MODEL = "no-such-model"
LONG_PROMPT_WORDS = 20_000  # about as many tokens: past every context the kit serves (MAX_MODEL_LEN, per slot)
WRONG_KEY = "not-the-key"
ERROR_FIELDS = ("message", "type", "param", "code")


def _chat_body(probe: Probe, **fields: Any) -> dict[str, Any]:
    return {
        "model": probe.model,
        "messages": [{"role": "user", "content": CHAT_PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        **fields,
    }


def error_object(response: httpx.Response) -> tuple[dict[str, Any] | None, str]:
    """The body's OpenAI error object, if it is one, and a line describing what the body is."""
    try:
        body = response.json()
    except ValueError:
        return None, f"body is not JSON: {short(response.text)}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None, f"body is not an OpenAI error object: {short(body)}"
    missing = [name for name in ERROR_FIELDS if name not in error]
    return error, f"{short(error)}" + (f" (no {', '.join(missing)})" if missing else "")


def answered_as(response: httpx.Response, status: int, names: tuple[str, ...] = ()) -> Outcome:
    """PASS for `status` with an error object whose message or param names one of `names` (any, when empty);
    FAIL for a 5xx or a traceback; DIFFERS for anything else."""
    if response.status_code >= 500 or TRACEBACK in response.text:
        return failed(f"HTTP {response.status_code}: {short(response.text)}")
    error, evidence = error_object(response)
    evidence = f"HTTP {response.status_code}: {evidence}"
    if response.status_code != status or error is None:
        return differs(evidence)
    said = f"{error.get('message')} {error.get('param') or ''}".lower()
    if names and not any(name.lower() in said for name in names):
        return differs(f"{evidence}; the message names none of {', '.join(names)}")
    return passed(evidence)


def error_unknown_model(probe: Probe) -> Outcome:
    return answered_as(probe.post("/chat/completions", _chat_body(probe, model=UNKNOWN_MODEL)), 404, (UNKNOWN_MODEL,))


def error_malformed_body(probe: Probe) -> Outcome:
    return answered_as(probe.post("/chat/completions", content=b'{"model": "x", "messages": [oops'), 400)


def error_bad_parameter(probe: Probe) -> Outcome:
    return answered_as(probe.post("/chat/completions", _chat_body(probe, temperature=-1)), 400, ("temperature",))


def error_context_length(probe: Probe) -> Outcome:
    """A prompt longer than any context here: 400 naming the limit (the engine's number where /v1/models lists it)."""
    body = _chat_body(probe, messages=[{"role": "user", "content": "hi " * LONG_PROMPT_WORDS}])
    response = probe.post("/chat/completions", body)
    limit = (str(probe.max_model_len), f"{probe.max_model_len:,}") if probe.max_model_len else ()
    outcome = answered_as(response, 400, limit or ("context", "length", "token"))
    if outcome.verdict is Verdict.PASS and not limit and not re.search(r"\d{3,}", outcome.evidence):
        return differs(f"{outcome.evidence}; the message gives no limit")
    return outcome


def error_auth(probe: Probe) -> Outcome:
    """No key, then a wrong key: 401 with an error object both times. Only when this run has a key to send."""
    if not probe.endpoint.api_key:
        return Outcome(
            Verdict.NOT_APPLICABLE,
            "no key set for this engine (VLLM_API_KEY, OPENAI_API_KEY or --api-key): nothing to refuse",
        )
    outcomes = [
        answered_as(probe.post("/chat/completions", _chat_body(probe), headers=headers), 401)
        for headers in ({}, {"Authorization": f"Bearer {WRONG_KEY}"})
    ]
    worst = max(outcomes, key=lambda outcome: (Verdict.PASS, Verdict.DIFFERS, Verdict.FAIL).index(outcome.verdict))
    return Outcome(worst.verdict, f"no key: {outcomes[0].evidence}; wrong key: {outcomes[1].evidence}")
