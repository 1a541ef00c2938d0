"""The checks, in one mapping (name -> check), and running them all against one engine.

A new check is one function in answers.py, tools.py or errors.py and one line here; the matrix, the results file, the
HTML report and the tests all read this mapping. The runner turns what the SDK raises into verdicts once, so a
check only says what the contract wants: a 4xx refusal is DIFFERS (the engine answered, honestly, that it
does not do it), a 5xx, a timeout or no connection is FAIL.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import openai

from client.endpoint import Endpoint
from labs.contract import answers, errors, tools
from labs.contract.probe import TRACEBACK, Check, CheckRecord, Outcome, Probe, Verdict, short

CHECKS: dict[str, Check] = {
    "models": answers.models,
    "chat": answers.chat,
    "chat_stream": answers.chat_stream,
    "include_usage": answers.include_usage,
    "usage_adds_up": answers.usage_adds_up,
    "completions": answers.completions,
    "completions_stream": answers.completions_stream,
    "finish_length": answers.finish_length,
    "finish_stop": answers.finish_stop,
    "max_completion_tokens": answers.max_completion_tokens,
    "stop_string": answers.stop_string,
    "stop_list": answers.stop_list,
    "temperature_zero": answers.temperature_zero,
    "seed": answers.seed,
    "n": answers.n,
    "logprobs": answers.logprobs,
    "completions_logprobs": answers.completions_logprobs,
    "echo": answers.echo,
    "json_object": answers.json_object,
    "json_schema": answers.json_schema,
    "tools_named": tools.tools_named,
    "tools_required": tools.tools_required,
    "tools_auto": tools.tools_auto,
    "tools_stream": tools.tools_stream,
    "tool_result": tools.tool_result,
    "error_unknown_model": errors.error_unknown_model,
    "error_malformed_body": errors.error_malformed_body,
    "error_bad_parameter": errors.error_bad_parameter,
    "error_context_length": errors.error_context_length,
    "error_auth": errors.error_auth,
}


def run_check(check: Check, probe: Probe) -> Outcome:
    """One check, with what the SDK or the wire raised turned into a verdict and its evidence."""
    try:
        return check(probe)
    except openai.APIStatusError as exc:
        text = exc.response.text
        if exc.status_code >= 500 or TRACEBACK in text:
            return Outcome(Verdict.FAIL, f"HTTP {exc.status_code}: {short(text)}")
        return Outcome(Verdict.DIFFERS, f"refused: HTTP {exc.status_code}: {short(text)}")
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        return Outcome(Verdict.FAIL, f"{exc.__class__.__name__}: {short(str(exc))}")
    except Exception as exc:
        return Outcome(Verdict.FAIL, f"unreadable answer ({exc.__class__.__name__}: {short(str(exc))})")


def run_all(
    endpoint: Endpoint,
    names: tuple[str, ...] = tuple(CHECKS),
    on_record: Callable[[CheckRecord], None] = lambda record: None,
) -> list[CheckRecord]:
    """Every named check against `endpoint`, in the registry's order; `endpoint.check()` has confirmed the model."""
    served = {model.id: model.max_model_len for model in endpoint.check()}
    probe = Probe.open(endpoint)
    probe.max_model_len = served.get(endpoint.model)
    records = []
    try:
        for name in names:
            started = time.perf_counter()
            outcome = run_check(CHECKS[name], probe)
            record = CheckRecord(name, endpoint.name, outcome.verdict, outcome.evidence, time.perf_counter() - started)
            on_record(record)
            records.append(record)
    finally:
        probe.close()
    return records
