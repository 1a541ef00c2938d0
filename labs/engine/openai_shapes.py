"""The OpenAI chat-completions contract as the engine's server speaks it: the request it accepts, the bodies and
stream chunks it answers with, and its errors, as plain dicts and server-sent-event lines.

A request is checked in one order (JSON, model, messages, length, sampling values); the first problem becomes a
`RequestError`: 404 for a model this server does not serve, 400 for the rest, in OpenAI's error shape.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from labs.engine import workload
from labs.engine.sequence import SamplingParams

DEFAULT_MAX_TOKENS = 64
DONE_EVENT = "data: [DONE]\n\n"


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message that says what to send instead."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> dict:
        kind = "NotFoundError" if self.status == 404 else "BadRequestError"
        return {"error": {"message": self.message, "type": kind, "code": self.status}}


@dataclass(slots=True)
class ChatRequest:
    body: dict
    prompt_token_ids: list[int]
    params: SamplingParams

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def include_usage(self) -> bool:  # a property: read only when the answer streams
        return bool((self.body.get("stream_options") or {}).get("include_usage"))


def parse_chat(raw_body: bytes, tokenizer, model_name: str, max_model_len: int) -> ChatRequest:  # noqa: ANN001
    try:
        body = json.loads(raw_body)
    except ValueError as exc:
        raise RequestError(400, f"the body must be JSON with a 'messages' list of {{role, content}} ({exc})") from None
    if not isinstance(body, dict) or body.get("model", model_name) != model_name:
        model = body.get("model") if isinstance(body, dict) else None
        raise RequestError(404, f"The model `{model}` does not exist. This server serves `{model_name}`.")
    try:
        prompt_token_ids = workload.chat_token_ids(tokenizer, body["messages"])
    except Exception as exc:  # noqa: BLE001 - any template failure is the request's fault
        raise RequestError(400, f"'messages' must be a non-empty list of {{role, content}} ({exc})") from None
    room = max_model_len - len(prompt_token_ids)
    if room < 1:
        raise RequestError(400, f"the prompt has {len(prompt_token_ids)} tokens; this engine's max_model_len is "
                                f"{max_model_len}: shorten it")
    try:
        wanted = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        params = SamplingParams(max_tokens=min(int(wanted), room), temperature=float(body.get("temperature", 1.0)),
                                ignore_eos=bool(body.get("ignore_eos", False)))
    except (ValueError, TypeError) as exc:
        raise RequestError(400, str(exc)) from None
    return ChatRequest(body, prompt_token_ids, params)


@dataclass(slots=True)
class Completion:
    """One answer: the final body and every stream chunk carry the same id, creation time and model."""

    model: str
    num_prompt_tokens: int
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def usage(self, num_completion_tokens: int) -> dict[str, int]:
        return {"prompt_tokens": self.num_prompt_tokens, "completion_tokens": num_completion_tokens,
                "total_tokens": self.num_prompt_tokens + num_completion_tokens}

    def message(self, content: str, reason: str | None, num_completion_tokens: int) -> dict:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": reason}], "usage": self.usage(num_completion_tokens)}

    def chunk(self, delta: dict, reason: str | None) -> str:
        return self._event({"choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})

    def usage_chunk(self, num_completion_tokens: int) -> str:
        return self._event({"choices": [], "usage": self.usage(num_completion_tokens)})

    def _event(self, fields: dict) -> str:
        return "data: " + json.dumps({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                      "model": self.model, **fields}) + "\n\n"


def model_list(model_name: str, max_model_len: int) -> dict:
    return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "teaching-engine",
                                        "max_model_len": max_model_len}]}
