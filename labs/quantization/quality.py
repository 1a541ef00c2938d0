"""What int8 weights cost in quality, read off the served engines: perplexity and greedy agreement.

Perplexity = exp(-mean log p(token | the tokens before it)) over a fixed text (eval.txt, beside this file),
cut into windows that fit the engine's context; each window's first token has no context and is not counted.
vLLM returns the log-probability of every prompt token (`prompt_logprobs: 0` on /v1/completions, one token
generated), so the engine under test scores the text itself: no second implementation of the model.
Greedy agreement: the lab prompts at temperature 0, each engine's answer against the first engine's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from client.endpoint import Endpoint, EndpointError
from labs.compare.workload import MATCHED_PROMPTS, SEED_PROMPTS

EVAL_TEXT = Path(__file__).with_name("eval.txt")  # its source and licence: serve/texts/README.md
WINDOW_TOKENS = 1000  # at most max_model_len - 1 (one token is generated); the kit's default is 1024
AGREEMENT_PROMPTS = SEED_PROMPTS + MATCHED_PROMPTS
AGREEMENT_MAX_TOKENS = 64
REQUEST_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Perplexity:
    value: float
    num_tokens: int  # the tokens scored
    num_windows: int


@dataclass(frozen=True, slots=True)
class Agreement:
    """How far an engine's greedy answers match a reference engine's, token by token."""

    num_prompts: int
    num_identical: int
    shared_prefix_share: float  # mean over prompts of (tokens shared from the start / reference answer's tokens)


def _post(endpoint: Endpoint, path: str, body: dict) -> dict:
    url = f"{endpoint.root_url}{path}"
    try:
        response = httpx.post(url, json=body, headers=endpoint.headers, timeout=REQUEST_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise endpoint.unreachable(exc) from None
    if response.status_code != httpx.codes.OK:
        raise EndpointError(
            f"{endpoint.name} at {url} answered HTTP {response.status_code}: {response.text[:200]} "
            "(this lab needs vLLM: its /tokenize and prompt_logprobs)"
        )
    return response.json()


def tokenize(endpoint: Endpoint, text: str) -> list[int]:
    return _post(endpoint, "/tokenize", {"model": endpoint.model, "prompt": text, "add_special_tokens": False})[
        "tokens"
    ]


def perplexity(
    endpoint: Endpoint,
    token_ids: list[int],
    window_tokens: int = WINDOW_TOKENS,
    max_windows: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Perplexity:
    """exp of the mean negative log-probability of each window's tokens after its first; `progress` hears of each
    window as it is sent (seconds each on a CPU: the whole text is a minute or more)."""
    windows = [token_ids[start : start + window_tokens] for start in range(0, len(token_ids), window_tokens)]
    windows = [window for window in windows if len(window) > 1][:max_windows]
    total_logprob, scored = 0.0, 0
    for number, window in enumerate(windows, 1):
        progress(f"window {number} of {len(windows)} ({len(window):,} tokens)")
        body = {"model": endpoint.model, "prompt": window, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
        scores = _post(endpoint, "/v1/completions", body)["choices"][0]["prompt_logprobs"]
        for token_id, entry in zip(window[1:], scores[1:], strict=True):
            total_logprob += entry[str(token_id)]["logprob"]
            scored += 1
    return Perplexity(math.exp(-total_logprob / scored), scored, len(windows))


def greedy_answers(
    endpoint: Endpoint, prompts: tuple[str, ...] = AGREEMENT_PROMPTS, max_tokens: int = AGREEMENT_MAX_TOKENS
) -> list[str]:
    answers = []
    for prompt in prompts:
        body = {
            "model": endpoint.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        answers.append(_post(endpoint, "/v1/chat/completions", body)["choices"][0]["message"]["content"] or "")
    return answers


def agreement(reference: list[list[int]], answers: list[list[int]]) -> Agreement:
    """Token-level agreement of `answers` with `reference` (both tokenized by the same tokenizer)."""
    shares = []
    for ours, theirs in zip(reference, answers, strict=True):
        shared = next(
            (index for index, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
            min(len(ours), len(theirs)),
        )
        shares.append(shared / len(ours) if ours else 1.0)
    return Agreement(
        len(reference),
        sum(ours == theirs for ours, theirs in zip(reference, answers, strict=True)),
        sum(shares) / len(shares) if shares else 1.0,
    )
