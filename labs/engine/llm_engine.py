"""The facade: requests in, tokens out, one `step()` at a time — and the KV accounting the course compares.

engine = LLMEngine(EngineConfig(policy="continuous", max_batch_size=16), SmolLM2(MODEL_DIR))
engine.add_request(prompt_token_ids, SamplingParams(max_tokens=24))
while engine.has_unfinished:
    engine.step()
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from labs.engine.block_pool import BlockPool
from labs.engine.config import EngineConfig
from labs.engine.model import SmolLM2
from labs.engine.model_runner import ModelRunner
from labs.engine.scheduler import make_scheduler
from labs.engine.sequence import SamplingParams, Sequence


@dataclass(slots=True)
class KVPeak:
    """KV slots at the step with the most live tokens: what paging reserves vs reserving max_len each."""

    live_tokens: int = 0
    paged_slots: int = 0  # blocks in use x block size
    max_len_slots: int = 0  # running sequences x max_model_len
    num_running: int = 0

    @property
    def max_len_over_paged(self) -> float:
        return self.max_len_slots / self.paged_slots if self.paged_slots else 0.0


@dataclass(slots=True)
class StepOutput:
    seqs: list[Sequence]  # every sequence that got a token this step
    new_token_ids: list[int]
    finished: list[Sequence]
    is_prefill: bool


class LLMEngine:
    def __init__(self, config: EngineConfig, model: SmolLM2, clock: Callable[[], float] = time.perf_counter) -> None:
        self.config = config
        self.clock = clock
        self.block_pool = BlockPool(config.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = make_scheduler(config, self.block_pool, model.shape.eos_token_id)
        self.runner = ModelRunner(model, config)
        self.kv_peak = KVPeak()
        self.num_steps = 0
        self._next_seq_id = 0

    def add_request(
        self, prompt_token_ids: list[int], params: SamplingParams, arrival_s: float | None = None
    ) -> Sequence:
        seq = Sequence(
            self._next_seq_id,
            prompt_token_ids,
            params,
            self.config.block_size,
            self.clock() if arrival_s is None else arrival_s,
        )
        self._next_seq_id += 1
        self.scheduler.add(seq)
        return seq

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished

    @property
    def num_preemptions(self) -> int:
        return self.scheduler.num_preemptions

    @property
    def prefix_hit_rate(self) -> float:
        queries = self.block_pool.num_prefix_query_tokens
        return self.block_pool.num_prefix_hit_tokens / queries if queries else 0.0

    def step(self) -> StepOutput | None:
        batch = self.scheduler.schedule()
        if batch is None:
            return None
        self._account()
        token_ids = self.runner.run(batch)
        now = self.clock()
        for seq in batch.seqs:
            if seq.first_token_s is None:
                seq.first_token_s = now
        finished = self.scheduler.postprocess(batch, token_ids)
        for seq in finished:
            seq.finished_s = now
        self.num_steps += 1
        return StepOutput(batch.seqs, token_ids, finished, batch.is_prefill)

    def _account(self) -> None:
        running = self.scheduler.running
        live = sum(seq.num_tokens for seq in running)
        if live > self.kv_peak.live_tokens:
            self.kv_peak = KVPeak(
                live_tokens=live,
                paged_slots=self.block_pool.num_used_blocks * self.config.block_size,
                max_len_slots=len(running) * self.config.max_model_len,
                num_running=len(running),
            )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
        """Run `prompts` to completion; their completion token ids, in order."""
        seqs = [self.add_request(prompt, params) for prompt in prompts]
        while self.has_unfinished:
            self.step()
        return [seq.completion_token_ids for seq in seqs]
