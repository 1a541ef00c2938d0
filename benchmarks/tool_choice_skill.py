"""How often the model itself picks a tool (`tool_choice: "auto"`): the model's skill, not the engine's.

    .venv/bin/python -m benchmarks.tool_choice_skill

A small fixed set of prompts, each sent once at temperature 0 with the same one tool (get_weather): half ask
something the tool answers, half do not. It counts, for each half, the answers that call the tool, and checks that
every call's arguments are JSON for the tool's schema. The engine serves `auto` the same way whatever the model
(it parses what the model writes); what the model writes is what this measures. Against the kit's vLLM by default
(OPENAI_BASE_URL, MODEL), or any engine with --endpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from openai import OpenAI

from client.endpoint import Endpoint, EndpointError
from labs.contract.tools import WEATHER_TOOL
from labs.results import Envelope, MeasuredEngine, command_line, write
from serve.config.paths import ROOT
from ui.cli import KitArgumentParser
from ui.progress import console, fail

MAX_TOKENS = 64
DEFAULT_OUT = ROOT / "results" / "tool_choice_skill"
TOOL_PROMPTS = (  # the tool answers these
    "What is the weather in Paris?",
    "Is it raining in London right now?",
    "How warm is it in Tokyo today?",
    "Tell me the current weather in Berlin.",
    "Should I take an umbrella in Madrid today?",
    "What's the temperature in New York at the moment?",
)
OTHER_PROMPTS = (  # and not these
    "Say OK.",
    "What is 2 + 2?",
    "Name a fruit.",
    "Write a haiku about the sea.",
    "Who wrote Hamlet?",
    "Translate 'thank you' into French.",
)


@dataclass(frozen=True, slots=True)
class Pick:
    """One prompt's answer under tool_choice auto."""

    prompt: str
    wants_tool: bool
    called: bool
    arguments_fit: bool | None  # None: no call
    answer: str  # the call as name(arguments), or the text


def ask(sdk: OpenAI, model: str, prompt: str, wants_tool: bool) -> Pick:
    message = (
        sdk.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            tools=[WEATHER_TOOL],
            tool_choice="auto",
            temperature=0,
            max_tokens=MAX_TOKENS,
        )
        .choices[0]
        .message
    )
    if not message.tool_calls:
        return Pick(prompt, wants_tool, False, None, message.content or "")
    call = message.tool_calls[0].model_dump()["function"]
    try:
        arguments = json.loads(call["arguments"])
        fits = isinstance(arguments, dict) and isinstance(arguments.get("city"), str)
    except ValueError:
        fits = False
    return Pick(prompt, wants_tool, True, fits, f"{call['name']}({call['arguments']})")


def measure(endpoint: Endpoint) -> dict[str, Any]:
    endpoint.check()
    sdk = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key or "none", max_retries=0, timeout=120)
    picks = [ask(sdk, endpoint.model, prompt, True) for prompt in TOOL_PROMPTS]
    picks += [ask(sdk, endpoint.model, prompt, False) for prompt in OTHER_PROMPTS]
    called_when_wanted = sum(pick.called for pick in picks if pick.wants_tool)
    called_when_not = sum(pick.called for pick in picks if not pick.wants_tool)
    return {
        "about": "tool_choice auto, temperature 0, one tool (get_weather): how often the model calls it by itself",
        "tool": WEATHER_TOOL,
        "max_tokens": MAX_TOKENS,
        "called_when_wanted": called_when_wanted,
        "num_wanted": len(TOOL_PROMPTS),
        "called_when_not_wanted": called_when_not,
        "num_not_wanted": len(OTHER_PROMPTS),
        "calls_with_arguments_fitting_the_schema": sum(bool(pick.arguments_fit) for pick in picks),
        "picks": [asdict(pick) for pick in picks],
    }


def build_parser() -> argparse.ArgumentParser:
    parser = KitArgumentParser(prog="python -m benchmarks.tool_choice_skill", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--endpoint",
        help="NAME=URL[@MODEL] of the engine to ask (default: the kit's, from OPENAI_BASE_URL and MODEL)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for results.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        endpoint = (Endpoint.from_spec(args.endpoint) if args.endpoint else Endpoint.from_env()).or_first_served()
        report = measure(endpoint)
    except (ValueError, EndpointError) as exc:
        fail(str(exc), code=2)
    command = command_line("python -m benchmarks.tool_choice_skill", sys.argv[1:] if argv is None else argv)
    engine = MeasuredEngine(endpoint.model, endpoint.base_url.removesuffix("/v1"))
    path = write(args.out / "results.json", Envelope.now(command, [engine]), report)
    for pick in report["picks"]:
        console.print(
            f"{'tool' if pick['wants_tool'] else 'text'}  {'CALL' if pick['called'] else 'text'}  "
            f"{pick['prompt']}  ->  {pick['answer'][:80]!r}"
        )
    console.print(
        f"auto called the tool on {report['called_when_wanted']} of {report['num_wanted']} prompts it answers and "
        f"{report['called_when_not_wanted']} of {report['num_not_wanted']} it does not; wrote {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
