"""The seed study's workload: requests arriving as a Poisson process, most short, a few long.

Everything is drawn from one seeded generator, so every configuration of an experiment replays exactly
the same requests at exactly the same moments.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from labs.loadtest.workload import arrival_gap_s

LENGTH_MIXES = ("mixed", "uniform")
LENGTH_JITTER = 0.25  # each request wants its class's length +/- 25%
QUESTIONS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a GPU does.",
    "Give me three tips for writing clear code.",
    "Why is the sky blue?",
    "Summarize the plot of Hamlet.",
    "What is a KV cache in a language model?",
    "Describe a cat to someone who has never seen one.",
    "How do vaccines work?",
    "Suggest a name for a bakery.",
    "What is the difference between RAM and disk?",
    "Write a short poem about autumn leaves.",
)
SHARED_SYSTEM_PROMPT = (
    "You are the support assistant of the Example Lab Kit. Answer politely and precisely. The kit serves "
    "small language models on laptops and servers through an OpenAI-compatible API. It can run vLLM natively "
    "or in Docker, and it can compare vLLM with llama.cpp. When a user asks about installation, tell them to "
    "run the up script; when they ask about tests, tell them to run the test script; when they ask about "
    "performance, explain batching, paged KV caches and prefix caching in plain words, with one example each. "
    "Never invent command-line flags. Keep answers short unless the user asks for detail."
)


@dataclass(slots=True)
class WorkloadSpec:
    num_requests: int = 48
    rate_per_s: float = 25.0
    long_fraction: float = 0.2
    short_tokens: int = 24
    long_tokens: int = 150
    lengths: str = "mixed"  # "uniform": every request wants short_tokens
    shared_prefix: bool = False  # every prompt starts with the same long system prompt
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise ValueError(f"requests={self.num_requests} is invalid: use a whole number greater than 0")
        if self.rate_per_s <= 0:
            raise ValueError(f"rate={self.rate_per_s} is invalid: use requests per second greater than 0")
        if not 0 <= self.long_fraction <= 1:
            raise ValueError(f"long_fraction={self.long_fraction} is invalid: use a fraction from 0 to 1")
        if min(self.short_tokens, self.long_tokens) < 1:
            raise ValueError(
                f"short/long tokens {self.short_tokens}/{self.long_tokens} are invalid: use whole "
                f"numbers greater than 0"
            )
        if self.lengths not in LENGTH_MIXES:
            raise ValueError(f"lengths={self.lengths!r} is invalid: use one of {', '.join(LENGTH_MIXES)}")


@dataclass(frozen=True, slots=True)
class Request:
    request_id: int
    arrival_s: float  # seconds after the first request
    prompt_token_ids: list[int]
    max_tokens: int


def build(spec: WorkloadSpec, tokenizer: PreTrainedTokenizerBase) -> list[Request]:
    rng = random.Random(spec.seed)
    requests, arrival_s = [], 0.0
    for request_id in range(spec.num_requests):
        if request_id:
            arrival_s += arrival_gap_s(rng, spec.rate_per_s)  # Poisson arrivals: exponential gaps
        is_long = spec.lengths == "mixed" and rng.random() < spec.long_fraction
        wanted = spec.long_tokens if is_long else spec.short_tokens
        max_tokens = max(1, round(wanted * rng.uniform(1 - LENGTH_JITTER, 1 + LENGTH_JITTER)))
        messages = [{"role": "user", "content": rng.choice(QUESTIONS)}]
        if spec.shared_prefix:
            messages.insert(0, {"role": "system", "content": SHARED_SYSTEM_PROMPT})
        requests.append(Request(request_id, arrival_s, chat_token_ids(tokenizer, messages), max_tokens))
    return requests


def chat_token_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])
