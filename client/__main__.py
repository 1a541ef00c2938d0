"""python -m client "prompt": ask the configured engine (OPENAI_BASE_URL + MODEL) and print the answer."""

from __future__ import annotations

import argparse
import sys

import openai

from client.endpoint import Endpoint, EndpointError
from serve.cli import KitArgumentParser, non_negative_float, positive_int

NO_KEY = "EMPTY"  # the SDK insists on a key; engines without one ignore it
TIMEOUT_S = 120.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(prog="python -m client", description=__doc__)
    parser.add_argument("prompt", help="what to ask")
    parser.add_argument("--no-stream", action="store_true", help="wait for the whole answer")
    parser.add_argument("--max-tokens", type=positive_int, default=256, help="longest answer in tokens (default 256)")
    parser.add_argument("--system", default=None, help="a system prompt")
    parser.add_argument("--temperature", type=non_negative_float, default=0.7, help="sampling temperature (default 0.7)")
    return parser.parse_args(argv)


def ask(endpoint: Endpoint, args: argparse.Namespace) -> None:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": args.prompt})
    request = dict(model=endpoint.model, messages=messages, max_tokens=args.max_tokens,
                   temperature=args.temperature)
    client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key or NO_KEY, timeout=TIMEOUT_S,
                           max_retries=0)
    if args.no_stream:
        reply = client.chat.completions.create(**request)
        print(reply.choices[0].message.content)
        return
    for chunk in client.chat.completions.create(**request, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()


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
    try:
        ask(endpoint, args)
    except openai.OpenAIError as exc:
        print(f"error: {explain(endpoint, exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
