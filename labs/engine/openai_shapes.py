"""What the engine's server answers, in the OpenAI contract's shapes: chat and text completions (the final body
and every stream chunk), the model list, and errors, as plain dicts and server-sent-event lines."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

DONE_EVENT = "data: [DONE]\n\n"


class RequestError(Exception):
    """A request the server refuses: its HTTP status, a message that says what to send instead, and the parameter."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict:
        """OpenAI's error object (`type` and `code` as vLLM fills them)."""
        kind = "NotFoundError" if self.status == 404 else "BadRequestError"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


@dataclass(slots=True)
class ChatAnswer:
    """One chat answer: the final body and every stream chunk carry the same id, creation time and model."""

    model: str
    num_prompt_tokens: int
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    OBJECT = "chat.completion"

    def usage(self, num_completion_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.num_prompt_tokens,
            "completion_tokens": num_completion_tokens,
            "total_tokens": self.num_prompt_tokens + num_completion_tokens,
        }

    def choice(self, text: str, reason: str | None) -> dict:
        return {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}

    def delta(self, text: str, reason: str | None) -> dict:
        return {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": reason}

    def first_chunk(self) -> str | None:
        """The chunk that opens a stream (the assistant's role), or None where the shape has none."""
        return self._event(
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        )

    def message(self, text: str, reason: str | None, num_completion_tokens: int) -> dict:
        return {
            "id": self.id,
            "object": self.OBJECT,
            "created": self.created,
            "model": self.model,
            "choices": [self.choice(text, reason)],
            "usage": self.usage(num_completion_tokens),
        }

    def chunk(self, text: str, reason: str | None) -> str:
        return self._event({"choices": [self.delta(text, reason)]})

    def usage_chunk(self, num_completion_tokens: int) -> str:
        return self._event({"choices": [], "usage": self.usage(num_completion_tokens)})

    def _event(self, fields: dict) -> str:
        return (
            "data: "
            + json.dumps(
                {
                    "id": self.id,
                    "object": f"{self.OBJECT}.chunk" if self.OBJECT.startswith("chat") else self.OBJECT,
                    "created": self.created,
                    "model": self.model,
                    **fields,
                }
            )
            + "\n\n"
        )


@dataclass(slots=True)
class TextAnswer(ChatAnswer):
    """One `/v1/completions` answer: the same, with `text` where chat has a message or a delta."""

    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    OBJECT = "text_completion"

    def choice(self, text: str, reason: str | None) -> dict:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}

    def delta(self, text: str, reason: str | None) -> dict:
        return self.choice(text, reason)

    def first_chunk(self) -> str | None:
        return None


def model_list(model_name: str, max_model_len: int) -> dict:
    return {
        "object": "list",
        "data": [{"id": model_name, "object": "model", "owned_by": "teaching-engine", "max_model_len": max_model_len}],
    }
