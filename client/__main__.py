"""python -m client ["prompt"]: ask the configured engine (OPENAI_BASE_URL + MODEL) and print the answer.

The prompt is the argument, else standard input when it is piped (`echo "Say OK." | python -m client`); with
neither, on a terminal, a multi-turn chat (client/chat.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import openai

from client.chat import chat, stream_reply
from client.endpoint import Endpoint, EndpointError
from ui.cli import KitArgumentParser, non_negative_float, positive_int

STOPPED = 130  # Ctrl-C, as a shell reports it
NO_KEY = "EMPTY"  # the SDK insists on a key; engines without one ignore it
TIMEOUT_S = 120.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(
        prog="python -m client", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("prompt", nargs="?", help="what to ask (default: standard input when piped, else a chat)")
    parser.add_argument("--no-stream", action="store_true", help="wait for the whole answer")
    parser.add_argument("--max-tokens", type=positive_int, default=256, help="longest answer in tokens (default 256)")
    parser.add_argument("--system", default=None, help="a system prompt")
    parser.add_argument(
        "--temperature", type=non_negative_float, default=0.7, help="sampling temperature (default 0.7)"
    )
    parser.add_argument(
        "--usage",
        action="store_true",
        help="after each answer, the tokens the engine counted and tok/s (in a chat: /usage)",
    )
    args = parser.parse_args(argv)
    if args.prompt is None and not sys.stdin.isatty():
        args.prompt = sys.stdin.read().strip()
        if not args.prompt:
            parser.error("no prompt: standard input was empty; pipe in the question or give it as an argument")
    return args


def ask(client: openai.OpenAI, request: dict[str, Any], args: argparse.Namespace) -> int:
    """One question, one answer; 130 when Ctrl-C stopped it."""
    request["messages"] = [*request["messages"], {"role": "user", "content": args.prompt}]
    if args.no_stream:
        reply = client.chat.completions.create(**request)
        print(reply.choices[0].message.content)
        if args.usage and reply.usage is not None:
            print(f"usage: {reply.usage.prompt_tokens} prompt tokens, {reply.usage.completion_tokens} answer tokens")
        return 0
    answer = stream_reply(client, request, args.usage)
    if answer.stopped:
        return STOPPED
    if args.usage:
        print(answer.usage_line())
    return 0


def explain(endpoint: Endpoint, exc: openai.OpenAIError) -> EndpointError:
    """The SDK's exception as the endpoint's one line that says what is wrong and how to fix it."""
    if isinstance(exc, openai.APIConnectionError):
        return endpoint.unreachable(exc)
    if isinstance(exc, openai.AuthenticationError):
        return endpoint.refused()
    if isinstance(exc, openai.NotFoundError):
        try:
            served = [model.id for model in endpoint.models()]
        except EndpointError:
            served = []
        return endpoint.not_served(served)
    if isinstance(exc, openai.APIStatusError):
        return EndpointError(f"{endpoint.base_url} answered {exc.status_code}: {exc.message}")
    return EndpointError(f"{endpoint.base_url}: {exc}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    endpoint = Endpoint.from_env()
    client = openai.OpenAI(
        base_url=endpoint.base_url, api_key=endpoint.api_key or NO_KEY, timeout=TIMEOUT_S, max_retries=0
    )
    request: dict[str, Any] = dict(
        model=endpoint.model,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        messages=[{"role": "system", "content": args.system}] if args.system else [],
    )
    try:
        if args.prompt is not None:
            return ask(client, request, args)
        endpoint.check()  # a chat says at once that the engine is not there, not after the first question
        return chat(client, request, args.usage, lambda exc: explain(endpoint, exc))
    except openai.OpenAIError as exc:
        print(f"error: {explain(endpoint, exc)}", file=sys.stderr)
    except EndpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
