"""The requests the engine's server accepts, `/v1/chat/completions` and `/v1/completions`, checked in one order
(JSON, model, prompt, length, parameters); the first problem becomes a `RequestError` (openai_shapes): 404 for
a model this server does not serve, 400 naming the parameter for the rest.

What the teaching engine does not do (several answers, log-probabilities, tools, structured output, a seed,
echo) it refuses with a 400 naming the parameter, rather than ignoring it: a client learns at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from labs.engine import workload
from labs.engine.openai_shapes import RequestError
from labs.engine.sequence import SamplingParams

DEFAULT_MAX_TOKENS = 64
MAX_STOP_STRINGS = 4  # OpenAI's own limit
# parameter -> the value that asks for nothing this engine lacks (absent or this value: accepted)
UNSUPPORTED = {
    "n": 1,
    "logprobs": None,
    "top_logprobs": None,
    "tools": None,
    "response_format": None,
    "seed": None,
    "echo": False,
    "best_of": 1,
    "suffix": None,
}
HARMLESS = {"response_format": {"type": "text"}, "logprobs": False}


@dataclass(slots=True)
class GenerationRequest:
    """A checked request: the prompt's token ids, how to sample, where to stop, and how to answer."""

    body: dict[str, Any]
    prompt_token_ids: list[int]
    params: SamplingParams
    stop: tuple[str, ...]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def include_usage(self) -> bool:  # a property: read only when the answer streams
        return bool((self.body.get("stream_options") or {}).get("include_usage"))


def _body(raw_body: bytes, model_name: str, shape: str) -> dict[str, Any]:
    try:
        body = json.loads(raw_body)
    except ValueError as exc:
        raise RequestError(400, f"the body must be a JSON object with {shape} ({exc})") from None
    if not isinstance(body, dict):
        raise RequestError(400, f"the body must be a JSON object with {shape}, not {type(body).__name__}")
    if body.get("model", model_name) != model_name:
        raise RequestError(
            404, f"The model `{body.get('model')}` does not exist. This server serves `{model_name}`.", "model"
        )
    for name, accepted in UNSUPPORTED.items():
        value = body.get(name, accepted)
        if value not in (accepted, None) and value != HARMLESS.get(name):
            raise RequestError(400, f"`{name}` is not supported by the teaching engine: leave it out", name)
    return body


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(400, f"`{name}` must be a number, got {json.dumps(value)}", name)
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP_STRINGS
        or not all(isinstance(item, str) and item for item in stops)
    ):
        raise RequestError(
            400, f"`stop` must be a string or a list of at most {MAX_STOP_STRINGS} non-empty strings", "stop"
        )
    return tuple(stops)


def _checked(body: dict[str, Any], prompt_token_ids: list[int], max_model_len: int) -> GenerationRequest:
    room = max_model_len - len(prompt_token_ids)
    if room < 1:
        raise RequestError(
            400,
            f"the prompt has {len(prompt_token_ids)} tokens; this engine's max_model_len is "
            f"{max_model_len}: shorten it",
            "messages" if "messages" in body else "prompt",
        )
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    wanted = body.get(name)
    wanted = DEFAULT_MAX_TOKENS if wanted is None else wanted
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        raise RequestError(400, f"`{name}` must be a whole number greater than 0, got {json.dumps(wanted)}", name)
    temperature = _number(body, "temperature", 1.0)
    if temperature < 0:
        raise RequestError(400, f"`temperature` must be 0 (greedy) or more, got {temperature}", "temperature")
    params = SamplingParams(
        max_tokens=min(wanted, room), temperature=float(temperature), ignore_eos=bool(body.get("ignore_eos", False))
    )
    return GenerationRequest(body, prompt_token_ids, params, _stop(body))


def parse_chat(raw_body: bytes, tokenizer, model_name: str, max_model_len: int) -> GenerationRequest:
    body = _body(raw_body, model_name, "a 'messages' list of {role, content}")
    try:
        prompt_token_ids = workload.chat_token_ids(tokenizer, body["messages"])
    except Exception as exc:
        raise RequestError(
            400, f"'messages' must be a non-empty list of {{role, content}} ({exc})", "messages"
        ) from None
    return _checked(body, prompt_token_ids, max_model_len)


def parse_completion(raw_body: bytes, tokenizer, model_name: str, max_model_len: int) -> GenerationRequest:
    body = _body(raw_body, model_name, "a 'prompt' string")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise RequestError(
            400, "'prompt' must be one non-empty string (the teaching engine answers one prompt a request)", "prompt"
        )
    return _checked(body, list(tokenizer(prompt)["input_ids"]), max_model_len)
