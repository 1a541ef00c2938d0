"""Who runs next: static batching and continuous batching behind one interface, with preemption.

Each call to `schedule()` returns one step's work: either a prefill of newly admitted sequences or one
decode token for every running sequence. The two policies differ in one decision only — when waiting
sequences may be admitted:

- static: only when the running batch is empty (fill a batch, run it until every member finishes);
- continuous: at every step, while the batch has room and the KV pool has blocks.

When a decode step finds no free block for a sequence's next token, the newest running sequence is
preempted: its blocks are freed and it goes back to the front of the queue, to be recomputed later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from labs.engine.block_pool import BlockPool
from labs.engine.config import EngineConfig
from labs.engine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledBatch:
    seqs: list[Sequence]
    is_prefill: bool


class Scheduler:
    def __init__(self, config: EngineConfig, block_pool: BlockPool, eos_token_id: int) -> None:
        self.max_batch_size = config.max_batch_size
        self.max_model_len = config.max_model_len
        self.block_pool = block_pool
        self.eos_token_id = eos_token_id
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        if seq.num_prompt_tokens >= self.max_model_len:
            raise ValueError(
                f"request {seq.seq_id} has {seq.num_prompt_tokens} prompt tokens, "
                f"max_model_len is {self.max_model_len}: shorten the prompt or raise max_model_len"
            )
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def may_admit(self) -> bool:
        raise NotImplementedError

    def schedule(self) -> ScheduledBatch | None:
        admitted = self._admit() if self.may_admit() else []
        if admitted:
            return ScheduledBatch(admitted, is_prefill=True)
        if self.running:
            self._reserve_decode_slots()
            return ScheduledBatch(list(self.running), is_prefill=False)
        return None

    def _admit(self) -> list[Sequence]:
        admitted: list[Sequence] = []
        while self.waiting and len(self.running) < self.max_batch_size:
            seq = self.waiting[0]
            if not self.block_pool.allocate(seq):
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def _reserve_decode_slots(self) -> None:
        """Every running sequence gets a slot for its next token; preempt from the tail when blocks run out."""
        pending, scheduled = self.running, []
        while pending:
            seq = pending.pop(0)
            while not self.block_pool.can_append(seq) and pending:
                self._preempt(pending.pop())
            if self.block_pool.can_append(seq):
                self.block_pool.append_slot(seq)
                scheduled.append(seq)
            else:
                self._preempt(seq)
        self.running = scheduled

    def _preempt(self, seq: Sequence) -> None:
        self.block_pool.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def postprocess(self, batch: ScheduledBatch, token_ids: list[int]) -> list[Sequence]:
        """Append each sequence's new token; retire (and free) the finished ones. Returns them."""
        finished = []
        for seq, token_id in zip(batch.seqs, token_ids, strict=True):
            seq.append_token(token_id)
            reason = self._finish_reason(seq, token_id)
            if reason:
                seq.status, seq.finish_reason = SequenceStatus.FINISHED, reason
                self.block_pool.free(seq)
                self.running.remove(seq)
                finished.append(seq)
        return finished

    def _finish_reason(self, seq: Sequence, token_id: int) -> str | None:
        if token_id == self.eos_token_id and not seq.params.ignore_eos:
            return "stop"
        if seq.num_completion_tokens >= seq.params.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None


class StaticScheduler(Scheduler):
    """Fill a batch, run it until every member finishes, only then admit again."""

    def may_admit(self) -> bool:
        return not self.running


class ContinuousScheduler(Scheduler):
    """Admit waiting sequences at every step while the batch has room and blocks allow."""

    def may_admit(self) -> bool:
        return True


def make_scheduler(config: EngineConfig, block_pool: BlockPool, eos_token_id: int) -> Scheduler:
    policy_to_class = {"static": StaticScheduler, "continuous": ContinuousScheduler}
    return policy_to_class[config.policy](config, block_pool, eos_token_id)
