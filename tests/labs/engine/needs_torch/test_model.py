"""The real SmolLM2 weights through the paged engine: greedy output equals Hugging Face transformers'."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from labs.engine.config import EngineConfig
from labs.engine.llm_engine import LLMEngine
from labs.engine.sequence import SamplingParams
from labs.engine.workload import SHARED_SYSTEM_PROMPT, chat_token_ids
from serve.config.model import MODEL_DIR

NEW_TOKENS = 20
PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain paged attention in one sentence.",
    "List three colors.",
)


@pytest.fixture(scope="module")
def prompt_ids(tokenizer) -> list[list[int]]:
    return [chat_token_ids(tokenizer, [{"role": "user", "content": prompt}]) for prompt in PROMPTS]


@pytest.fixture(scope="module")
def hf_greedy(prompt_ids: list[list[int]]) -> list[list[int]]:
    hf = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()
    outputs = []
    with torch.inference_mode():
        for ids in prompt_ids:
            out = hf.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=2,
            )
            outputs.append(out[0, len(ids) :].tolist())
    return outputs


def greedy(model, prompts: list[list[int]], **overrides) -> list[list[int]]:
    engine = LLMEngine(EngineConfig(**({"max_model_len": 256, "num_blocks": 64} | overrides)), model)
    return engine.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS))


def test_batched_greedy_matches_transformers_token_for_token(model, prompt_ids, hf_greedy) -> None:
    assert len({len(ids) for ids in prompt_ids}) > 1, "prompts of different lengths exercise the padding"
    assert greedy(model, prompt_ids, max_batch_size=4) == hf_greedy


def test_block_size_one_and_static_batching_give_the_same_tokens(model, prompt_ids, hf_greedy) -> None:
    assert greedy(model, prompt_ids, policy="static", max_batch_size=2, block_size=1, num_blocks=1024) == hf_greedy


def test_prefix_cache_hits_do_not_change_the_answer(model, tokenizer) -> None:
    prompts = [
        chat_token_ids(
            tokenizer, [{"role": "system", "content": SHARED_SYSTEM_PROMPT}, {"role": "user", "content": question}]
        )
        for question in PROMPTS[:2]
    ]
    cold = greedy(model, prompts, max_batch_size=1)
    engine = LLMEngine(
        EngineConfig(max_model_len=256, num_blocks=64, max_batch_size=1, enable_prefix_caching=True), model
    )
    warm = engine.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS))
    assert engine.block_pool.num_prefix_hit_tokens >= 100
    assert warm == cold


def test_preempted_and_recomputed_sequences_give_the_same_tokens(model, prompt_ids, hf_greedy) -> None:
    engine = LLMEngine(EngineConfig(max_model_len=64, num_blocks=10, block_size=8, max_batch_size=4), model)
    outputs = engine.generate(prompt_ids, SamplingParams(max_tokens=NEW_TOKENS))
    assert engine.num_preemptions > 0
    assert outputs == hf_greedy
