"""The checks of answers: what an engine sends back for a request the contract says it must serve.

Each is one small function of a `Probe`, asking for a few tokens at temperature 0. A parameter the engine
refuses with a 4xx is DIFFERS (the runner says so with the error); one it silently ignores is DIFFERS too, with
what came back instead.
"""

from __future__ import annotations

import json
from typing import Any

from labs.contract.probe import CHAT_PROMPT, MAX_TOKENS, TEXT_PROMPT, Outcome, Probe, differs, expect, short

STOP_PROMPT = "Count from 1 to 20, separated by commas."
STOP_BASELINE_TOKENS = 12
NEVER_SEEN = "§never-in-an-answer§"
FINISH_STOP_TOKENS = 48  # room enough for the model to end "Say OK." by itself
SEED = 1234
NUM_TOP_LOGPROBS = 2
JSON_TOKENS = 40
JSON_PROMPT = 'Reply with a JSON object whose one key "answer" holds the word OK.'
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def models(probe: Probe) -> Outcome:
    listed = [model.id for model in probe.sdk.models.list().data]
    return expect(probe.model in listed, f"lists {short(listed)}")


def chat(probe: Probe) -> Outcome:
    choice = probe.chat().choices[0]
    return expect(
        bool(choice.message.content) and choice.finish_reason in ("stop", "length"),
        f"content {short(choice.message.content)}, finish_reason {choice.finish_reason}",
    )


def _streamed(chunks: Any, text_of: Any) -> tuple[str, str | None, int, Any]:
    text, reason, count, usage = "", None, 0, None
    for chunk in chunks:
        count += 1
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += text_of(choice) or ""
            reason = choice.finish_reason or reason
    return text, reason, count, usage


def chat_stream(probe: Probe) -> Outcome:
    text, reason, count, _ = _streamed(probe.chat(stream=True), lambda choice: choice.delta.content)
    return expect(
        bool(text) and reason in ("stop", "length"), f"{count} chunks, text {short(text)}, finish_reason {reason}"
    )


def include_usage(probe: Probe) -> Outcome:
    *_, last = list(probe.chat(stream=True, stream_options={"include_usage": True}))
    usage = last.usage
    return expect(
        usage is not None and not last.choices and usage.completion_tokens > 0,
        f"last chunk: choices {len(last.choices)}, usage {short(usage.model_dump() if usage else None)}",
    )


def usage_adds_up(probe: Probe) -> Outcome:
    usage = probe.chat().usage
    if usage is None:
        return differs("no usage in the answer")
    adds_up = usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    return expect(
        adds_up and 0 < usage.completion_tokens <= MAX_TOKENS and usage.prompt_tokens > 0,
        f"prompt {usage.prompt_tokens} + completion {usage.completion_tokens} = total {usage.total_tokens}"
        f" (max_tokens {MAX_TOKENS})",
    )


def completions(probe: Probe) -> Outcome:
    choice = probe.complete().choices[0]
    return expect(
        bool(choice.text) and choice.finish_reason in ("stop", "length"),
        f"text {short(choice.text)}, finish_reason {choice.finish_reason}",
    )


def completions_stream(probe: Probe) -> Outcome:
    text, reason, count, _ = _streamed(probe.complete(stream=True), lambda choice: choice.text)
    return expect(
        bool(text) and reason in ("stop", "length"), f"{count} chunks, text {short(text)}, finish_reason {reason}"
    )


def finish_length(probe: Probe) -> Outcome:
    answer = probe.chat("Tell a long story about a cat.", max_tokens=3)
    tokens = answer.usage.completion_tokens if answer.usage else None
    reason = answer.choices[0].finish_reason
    return expect(reason == "length" and tokens == 3, f"max_tokens 3: finish_reason {reason}, {tokens} tokens")


def finish_stop(probe: Probe) -> Outcome:
    choice = probe.chat(CHAT_PROMPT, max_tokens=FINISH_STOP_TOKENS).choices[0]
    return expect(
        choice.finish_reason == "stop", f"finish_reason {choice.finish_reason}, content {short(choice.message.content)}"
    )


def max_completion_tokens(probe: Probe) -> Outcome:
    # "Say OK." ends by itself in about a dozen tokens: an engine that ignores the limit stays short too
    answer = probe.sdk.chat.completions.create(
        model=probe.model, max_completion_tokens=3, temperature=0, messages=[{"role": "user", "content": CHAT_PROMPT}]
    )
    tokens = answer.usage.completion_tokens if answer.usage else None
    return expect(
        tokens is not None and tokens <= 3,
        f"max_completion_tokens 3: {tokens} tokens, finish_reason {answer.choices[0].finish_reason}",
    )


def _stop_case(probe: Probe, as_list: bool) -> Outcome:
    """The greedy answer without a stop, then with its third word as the stop: the text must end just before it."""
    baseline = probe.chat(STOP_PROMPT, max_tokens=STOP_BASELINE_TOKENS).choices[0].message.content or ""
    words = baseline.split()
    if len(words) < 3 or baseline.index(words[2]) == 0:
        return differs(f"no answer long enough to pick a stop from: {short(baseline)}")
    stop_word = words[2]
    expected = baseline[: baseline.index(stop_word)]
    stop: str | list[str] = [NEVER_SEEN, stop_word] if as_list else stop_word
    choice = probe.chat(STOP_PROMPT, max_tokens=STOP_BASELINE_TOKENS, stop=stop).choices[0]
    text = choice.message.content or ""
    return expect(
        text.rstrip() == expected.rstrip() and choice.finish_reason == "stop",
        f"stop {short(stop)}: got {short(text)} (finish_reason {choice.finish_reason}), want {short(expected)}",
    )


def stop_string(probe: Probe) -> Outcome:
    return _stop_case(probe, as_list=False)


def stop_list(probe: Probe) -> Outcome:
    return _stop_case(probe, as_list=True)


def temperature_zero(probe: Probe) -> Outcome:
    first, second = (probe.chat("Name a fruit.").choices[0].message.content for _ in range(2))
    return expect(first == second, f"{short(first)} then {short(second)}")


def seed(probe: Probe) -> Outcome:
    first, second = (
        probe.chat("Name a fruit.", temperature=1.0, seed=SEED, max_tokens=MAX_TOKENS * 2).choices[0].message.content
        for _ in range(2)
    )
    return expect(first == second, f"temperature 1, seed {SEED}: {short(first)} then {short(second)}")


def n(probe: Probe) -> Outcome:
    answer = probe.chat("Name a fruit.", n=2, temperature=1.0)
    return expect(sorted(choice.index for choice in answer.choices) == [0, 1], f"n 2: {len(answer.choices)} choice(s)")


def logprobs(probe: Probe) -> Outcome:
    choice = probe.chat(logprobs=True, top_logprobs=NUM_TOP_LOGPROBS).choices[0]
    content = choice.logprobs.content if choice.logprobs else None
    if not content:
        return differs(f"no logprobs.content in the answer (logprobs {short(choice.logprobs)})")
    sizes = [len(token.top_logprobs) for token in content]
    return expect(
        all(size == NUM_TOP_LOGPROBS for size in sizes),
        f"{len(content)} tokens with logprobs; top_logprobs per token {sizes}",
    )


def completions_logprobs(probe: Probe) -> Outcome:
    found = probe.complete(logprobs=NUM_TOP_LOGPROBS).choices[0].logprobs
    if not found or not found.tokens:
        return differs(f"no logprobs.tokens in the answer (logprobs {short(found)})")
    sizes = [len(top or {}) for top in found.top_logprobs or []]
    return expect(
        len(found.token_logprobs or []) == len(found.tokens)
        and bool(sizes)
        and all(size >= NUM_TOP_LOGPROBS for size in sizes),
        f"{len(found.tokens)} tokens; top_logprobs per token {sizes}",
    )


def echo(probe: Probe) -> Outcome:
    text = probe.complete(echo=True, max_tokens=2).choices[0].text
    return expect(text.startswith(TEXT_PROMPT), f"echo: text {short(text)}")


def _json_answer(probe: Probe, response_format: dict[str, Any]) -> tuple[Any, str]:
    choice = probe.chat(JSON_PROMPT, max_tokens=JSON_TOKENS, response_format=response_format).choices[0]
    text = choice.message.content or ""
    try:
        return json.loads(text), f"{short(text)} (finish_reason {choice.finish_reason})"
    except ValueError:
        return None, f"not JSON: {short(text)} (finish_reason {choice.finish_reason})"


def json_object(probe: Probe) -> Outcome:
    value, evidence = _json_answer(probe, {"type": "json_object"})
    return expect(isinstance(value, dict), evidence)


def json_schema(probe: Probe) -> Outcome:
    value, evidence = _json_answer(
        probe, {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
    )
    matches = isinstance(value, dict) and set(value) == {"answer"} and isinstance(value["answer"], str)
    return expect(matches, evidence if matches or value is None else f"does not match the schema: {evidence}")
