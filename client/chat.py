"""A conversation with the engine, as `ollama run` holds one: `python -m client` with no prompt, on a terminal.

Line editing and the input history (arrow keys) are the standard library's readline. Every turn sends the whole
conversation so far (the system prompt, every question and answer) and streams the answer. `/usage` turns the
usage line after each answer on or off (`--usage` starts with it on); `/bye` or Ctrl-D leaves. Ctrl-C stops the
answer in flight (the stream is closed, so the engine stops generating; that turn is not kept) and, at the
prompt, clears the line: it never ends the session.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai

PROMPT = ">>> "
COMMANDS = {"/usage": "show or hide tokens and tok/s after each answer", "/bye": "leave (or Ctrl-D)"}


@dataclass(slots=True)
class Reply:
    """One answer as it arrived: its text, whether Ctrl-C cut it short, and the engine's token counts."""

    text: str = ""
    stopped: bool = False
    prompt_tokens: int | None = None
    answer_tokens: int | None = None
    sent_s: float = 0.0  # perf_counter seconds
    first_token_s: float | None = None
    done_s: float = 0.0

    def usage_line(self) -> str:
        """Tokens as the engine counted them; tok/s = answer tokens / seconds from sending to the last token."""
        if self.answer_tokens is None:
            return "usage: the engine reported no token counts"
        elapsed_s = self.done_s - self.sent_s
        first = f", first token after {self.first_token_s - self.sent_s:.2f} s" if self.first_token_s else ""
        rate = f" ({self.answer_tokens / elapsed_s:.1f} tok/s)" if elapsed_s > 0 else ""
        return (
            f"usage: {self.prompt_tokens} prompt tokens, {self.answer_tokens} answer tokens in "
            f"{elapsed_s:.2f} s{rate}{first}"
        )


def stream_reply(client: openai.OpenAI, request: dict[str, Any], usage: bool) -> Reply:
    """Print the answer as it streams (asking for the token counts when `usage`); Ctrl-C closes the stream and
    returns what came (`stopped`)."""
    reply = Reply(sent_s=time.perf_counter())
    options: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
    stream = None
    try:
        stream = client.chat.completions.create(**request, stream=True, **options)
        for chunk in stream:
            if chunk.usage is not None:
                reply.prompt_tokens, reply.answer_tokens = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].delta.content:
                reply.first_token_s = reply.first_token_s or time.perf_counter()
                reply.text += chunk.choices[0].delta.content
                print(chunk.choices[0].delta.content, end="", flush=True)
    except KeyboardInterrupt:
        reply.stopped = True
        if stream is not None:
            stream.close()  # the engine sees the connection go and stops generating
    reply.done_s = time.perf_counter()
    print()
    return reply


def read_line() -> str | None:
    """The next line typed; None at Ctrl-D. Ctrl-C at the prompt starts a fresh line."""
    while True:
        try:
            return input(PROMPT)
        except KeyboardInterrupt:
            print("^C (Ctrl-D or /bye leaves)")
        except EOFError:
            print()
            return None


def chat(
    client: openai.OpenAI, request: dict[str, Any], show_usage: bool, explain: Callable[[openai.OpenAIError], object]
) -> int:
    """The conversation loop; `request` holds the model, sampling and the system prompt's messages.
    `explain` turns an SDK error into the line to print (client.__main__.explain); the session goes on."""
    import readline  # noqa: F401  (importing it gives input() line editing and history)

    messages: list[dict[str, str]] = list(request.pop("messages"))
    print(
        f"Chatting with {request['model']}. Commands: "
        + "; ".join(f"{name} {what}" for name, what in COMMANDS.items())
        + "; Ctrl-C stops an answer."
    )
    while (line := read_line()) is not None:
        text = line.strip()
        if text == "/bye":
            break
        if text == "/usage":
            show_usage = not show_usage
            print(f"usage after each answer: {'on' if show_usage else 'off'}")
            continue
        if not text:
            continue
        if text.startswith("/") and " " not in text:
            print(f"unknown command {text}; the commands are {', '.join(COMMANDS)}", file=sys.stderr)
            continue
        turn = [*messages, {"role": "user", "content": text}]
        try:
            reply = stream_reply(client, {**request, "messages": turn}, show_usage)
        except openai.OpenAIError as exc:
            print(f"error: {explain(exc)}", file=sys.stderr)
            continue
        if reply.stopped:
            print("(stopped: this answer is not kept in the conversation)")
            continue
        messages = [*turn, {"role": "assistant", "content": reply.text}]
        if show_usage:
            print(reply.usage_line())
    return 0
