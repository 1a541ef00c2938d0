"""The checks of tool calls: the requests an agent sends (one tool, chosen by name, required, or left to the model),
a streamed call, and the turn that gives the tool's result back.

The contract: a named function or `required` comes back as a tool call whose arguments are JSON for the tool's
schema; `auto` comes back as text or such a call; a streamed call arrives as `delta.tool_calls` (the id and name
once, the arguments in pieces); after a `tool` turn answering the call, the model answers in text. What the model
chooses under `auto` is its own skill, not the engine's: any answer that is not an error passes.
"""

from __future__ import annotations

import json
from typing import Any

from labs.contract.probe import Outcome, Probe, differs, expect, passed, short

TOOL_TOKENS = 48  # room for a call's JSON, and for a sentence after the tool's result
CITY = "Paris"
TOOL_PROMPT = f"What is the weather in {CITY}?"
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
CALL_ID = "call_contract_1"
RESULT = "Sunny, 21 degrees Celsius."
# the conversation after the model called the tool: the call as the assistant's turn, then the tool's answer
AFTER_THE_CALL: Any = [
    {"role": "user", "content": TOOL_PROMPT},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": CALL_ID,
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": CITY})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": CALL_ID, "content": RESULT},
]


def _ask(probe: Probe, tool_choice: Any, **params: Any) -> Any:
    return probe.chat(TOOL_PROMPT, max_tokens=TOOL_TOKENS, tools=[WEATHER_TOOL], tool_choice=tool_choice, **params)


def _fits_the_schema(name: str | None, arguments: str | None) -> tuple[bool, str]:
    """Whether a call is get_weather with JSON arguments holding a string `city`, and how it reads as evidence."""
    try:
        parsed = json.loads(arguments or "")
    except ValueError:
        return False, f"tool call {name} with arguments that are not JSON: {short(arguments)}"
    fits = name == "get_weather" and isinstance(parsed, dict) and isinstance(parsed.get("city"), str)
    return fits, f"tool call {name}({short(parsed)})"


def _one_call(answer: Any) -> Outcome:
    choice = answer.choices[0]
    if not choice.message.tool_calls:
        return differs(f"no tool call; answered text {short(choice.message.content)}")
    call = choice.message.tool_calls[0].function
    fits, evidence = _fits_the_schema(call.name, call.arguments)
    return expect(fits, f"{evidence}, finish_reason {choice.finish_reason}")


def tools_named(probe: Probe) -> Outcome:
    return _one_call(_ask(probe, NAMED))


def tools_required(probe: Probe) -> Outcome:
    return _one_call(_ask(probe, "required"))


def tools_auto(probe: Probe) -> Outcome:
    choice = _ask(probe, "auto").choices[0]
    if choice.message.tool_calls:
        call = choice.message.tool_calls[0].function
        fits, evidence = _fits_the_schema(call.name, call.arguments)
        return expect(fits, f"the model chose {evidence}")
    return expect(bool(choice.message.content), f"the model chose text: {short(choice.message.content)}")


def tools_stream(probe: Probe) -> Outcome:
    """A named call, streamed: its id and name once, its arguments in pieces that join to JSON."""
    ids, names, arguments, text, chunks = [], [], "", "", 0
    for chunk in _ask(probe, NAMED, stream=True):
        chunks += 1
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                ids += [delta.id] if delta.id else []
                names += [delta.function.name] if delta.function and delta.function.name else []
                arguments += (delta.function.arguments or "") if delta.function else ""
    if not names:
        return differs(f"{chunks} chunks and no tool-call delta; streamed text {short(text)}")
    fits, evidence = _fits_the_schema(names[0], arguments)
    return expect(fits and len(ids) == 1 and len(names) == 1, f"{chunks} chunks: {evidence}, ids {short(ids)}")


def tool_result(probe: Probe) -> Outcome:
    """The turn after the call: the tool's result given back (`role: tool`, `tool_call_id`) gets a text answer."""
    answer = probe.sdk.chat.completions.create(
        model=probe.model, messages=AFTER_THE_CALL, tools=[WEATHER_TOOL], temperature=0, max_tokens=TOOL_TOKENS
    )
    choice = answer.choices[0]
    if choice.message.tool_calls:
        return differs(f"called a tool again: {short(choice.message.tool_calls[0].model_dump())}")
    content = choice.message.content or ""
    return (passed if content else differs)(f"answered {short(content)}, finish_reason {choice.finish_reason}")
