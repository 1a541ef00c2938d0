"""The study's shape from the policy alone: the seed workload replayed with a fixed cost per step.

The model is a fake (named so): every step costs a fixed time on a fake clock and returns a dummy token, so
only the scheduler, the block pool and the replay decide the timings. This is what the lab page leans on when
the shared CPU makes one row of the real study noisy.
"""

from __future__ import annotations

import torch

from labs.engine import workload
from labs.engine.config import EngineConfig
from labs.engine.llm_engine import LLMEngine
from labs.engine.replay import replay
from labs.engine.report import summarize
from labs.engine.scheduler import ScheduledBatch

STEP_S = 0.1
PREFILL_S_PER_TOKEN = 0.002
DECODE_S_PER_SEQ = 0.004
DUMMY_TOKEN = 7


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def skip_to(self, moment_s: float) -> None:
        self.now_s = max(self.now_s, moment_s)


class FakeModel:
    """Stands in for SmolLM2: the engine needs its eos id, dtype and a (here empty) KV cache."""

    class shape:
        eos_token_id = 2

    dtype = torch.float32

    def new_kv_cache(self, num_slots: int) -> list:
        return []


def run_policy(policy: str, max_batch: int, requests: list[workload.Request]):
    clock = FakeClock()
    engine = LLMEngine(EngineConfig(policy=policy, max_batch_size=max_batch), FakeModel(), clock)

    def fixed_cost_step(batch: ScheduledBatch) -> list[int]:
        if batch.is_prefill:
            clock.now_s += STEP_S + PREFILL_S_PER_TOKEN * sum(
                seq.num_tokens - seq.num_cached_tokens for seq in batch.seqs
            )
        else:
            clock.now_s += STEP_S + DECODE_S_PER_SEQ * len(batch.seqs)
        return [DUMMY_TOKEN] * len(batch.seqs)

    engine.runner.run = fixed_cost_step
    seqs = replay(engine, clock, requests)
    assert all(seq.num_completion_tokens == request.max_tokens for seq, request in zip(seqs, requests, strict=True))
    return summarize(engine, seqs, wall_s=0.0)


def test_continuous_beats_static_on_ttft_and_throughput_at_every_max_batch(tokenizer) -> None:
    requests = workload.build(workload.WorkloadSpec(), tokenizer)
    for max_batch in (2, 4, 8, 16, 32):
        static, continuous = run_policy("static", max_batch, requests), run_policy("continuous", max_batch, requests)
        assert continuous.ttft_p50_ms < static.ttft_p50_ms, max_batch
        assert continuous.output_tokens_per_s > static.output_tokens_per_s, max_batch
        assert continuous.kv_max_len_over_paged > 2.5  # the page reports 2.8-3.6x at batch 2-16


def test_with_uniform_lengths_static_nearly_catches_up(tokenizer) -> None:
    mixed = workload.build(workload.WorkloadSpec(), tokenizer)
    uniform = workload.build(workload.WorkloadSpec(lengths="uniform"), tokenizer)

    def gain(requests: list[workload.Request]) -> float:
        static, continuous = run_policy("static", 16, requests), run_policy("continuous", 16, requests)
        return continuous.output_tokens_per_s / static.output_tokens_per_s

    assert gain(uniform) < gain(mixed)
