"""python -m client "prompt": ask the configured engine (OPENAI_BASE_URL + MODEL) and print the answer."""

from __future__ import annotations

import argparse
import sys

import openai

from client.engine import Engine, explain
from serve.cli import KitArgumentParser, non_negative_float, positive_int


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(prog="python -m client", description=__doc__)
    parser.add_argument("prompt", help="what to ask")
    parser.add_argument("--no-stream", action="store_true", help="wait for the whole answer")
    parser.add_argument("--max-tokens", type=positive_int, default=256, help="longest answer in tokens (default 256)")
    parser.add_argument("--system", default=None, help="a system prompt")
    parser.add_argument("--temperature", type=non_negative_float, default=0.7, help="sampling temperature (default 0.7)")
    return parser.parse_args(argv)


def ask(engine: Engine, args: argparse.Namespace) -> None:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": args.prompt})
    request = dict(model=engine.model, messages=messages, max_tokens=args.max_tokens,
                   temperature=args.temperature)
    client = engine.client()
    if args.no_stream:
        reply = client.chat.completions.create(**request)
        print(reply.choices[0].message.content)
        return
    for chunk in client.chat.completions.create(**request, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    engine = Engine.from_env()
    try:
        ask(engine, args)
    except openai.OpenAIError as exc:
        print(f"error: {explain(engine, exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
