"""Whether two engines give the same greedy answers: the same prompts at temperature 0 to each, answer by answer.

    .venv/bin/python -m benchmarks.same_answers --endpoint a=http://127.0.0.1:8009/v1 --endpoint b=http://127.0.0.1:8010/v1

For a change that must not touch answers without tools (the kit's tool-call flags and template: the same prompt
token for token, tests/serve/test_tool_calls.py): the same weights and settings otherwise, the same text. Each
prompt goes to the engines in turn, and the answers and their token counts are compared; tok/s is not measured here
(benchmarks.kit_vs_defaults alternates the engines round by round for that).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from openai import OpenAI

from client.endpoint import Endpoint, EndpointError
from labs.loadtest.workload import DEFAULT_PROMPTS
from labs.results import Envelope, MeasuredEngine, command_line, write
from serve.config.paths import ROOT
from ui.cli import KitArgumentParser, positive_int
from ui.progress import console, fail

DEFAULT_OUT = ROOT / "results" / "same_answers"
DEFAULT_MAX_TOKENS = 64
CHAT_PROMPTS = ("Say OK.", "What is vLLM?", "Name three fruits.")


def answer(sdk: OpenAI, model: str, prompt: str, max_tokens: int) -> tuple[str, int]:
    reply = sdk.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=max_tokens
    )
    return reply.choices[0].message.content or "", reply.usage.completion_tokens if reply.usage else 0


def compare(endpoints: list[Endpoint], max_tokens: int) -> dict[str, Any]:
    clients = [
        OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key or "none", max_retries=0, timeout=120)
        for endpoint in endpoints
    ]
    prompts = [*CHAT_PROMPTS, *DEFAULT_PROMPTS]
    rows = []
    for prompt in prompts:
        answers = [
            answer(sdk, endpoint.model, prompt, max_tokens) for sdk, endpoint in zip(clients, endpoints, strict=True)
        ]
        rows.append(
            {
                "prompt": prompt,
                "same": len({text for text, _ in answers}) == 1,
                "answers": {endpoint.name: text for endpoint, (text, _) in zip(endpoints, answers, strict=True)},
                "completion_tokens": {
                    endpoint.name: tokens for endpoint, (_, tokens) in zip(endpoints, answers, strict=True)
                },
            }
        )
    return {
        "about": "the same chat prompts at temperature 0 to each engine in turn: are the answers the same?",
        "max_tokens": max_tokens,
        "num_prompts": len(rows),
        "num_same": sum(row["same"] for row in rows),
        "prompts": rows,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = KitArgumentParser(prog="python -m benchmarks.same_answers", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--endpoint", action="append", required=True, help="NAME=URL[@MODEL], two or more (repeat the option)"
    )
    parser.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        endpoints = [Endpoint.from_spec(spec).or_first_served() for spec in args.endpoint]
        if len(endpoints) < 2:
            raise ValueError("--endpoint: give two engines or more to compare (repeat the option)")
        report = compare(endpoints, args.max_tokens)
    except (ValueError, EndpointError) as exc:
        fail(str(exc), code=2)
    command = command_line("python -m benchmarks.same_answers", sys.argv[1:] if argv is None else argv)
    engines = [MeasuredEngine(endpoint.model, endpoint.base_url.removesuffix("/v1")) for endpoint in endpoints]
    path = write(args.out / "results.json", Envelope.now(command, engines), report)
    for row in report["prompts"]:
        console.print(f"{'same' if row['same'] else 'DIFFERENT'}  {row['prompt'][:60]}")
    console.print(f"{report['num_same']} of {report['num_prompts']} answers the same; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
