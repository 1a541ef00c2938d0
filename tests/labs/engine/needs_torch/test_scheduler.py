"""Both schedulers and preemption, driven with chosen tokens (no model: the policy is what is under test)."""

from __future__ import annotations

from labs.engine.block_pool import BlockPool
from labs.engine.config import EngineConfig
from labs.engine.scheduler import ContinuousScheduler, StaticScheduler, make_scheduler
from labs.engine.sequence import SamplingParams, Sequence, SequenceStatus

EOS = 2
TOKEN = 7


def setup(policy: str, max_batch: int, num_blocks: int = 64, block_size: int = 4, max_model_len: int = 64):
    config = EngineConfig(
        policy=policy,
        max_batch_size=max_batch,
        block_size=block_size,
        num_blocks=num_blocks,
        max_model_len=max_model_len,
    )
    pool = BlockPool(num_blocks, block_size)
    return make_scheduler(config, pool, EOS), pool


def add(scheduler, seq_id: int, max_tokens: int, prompt_len: int = 3, ignore_eos: bool = True) -> Sequence:
    seq = Sequence(
        seq_id,
        [10 + seq_id] * prompt_len,
        SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos),
        scheduler.block_pool.block_size,
    )
    scheduler.add(seq)
    return seq


def step(scheduler, token: int = TOKEN):
    batch = scheduler.schedule()
    finished = scheduler.postprocess(batch, [token] * len(batch.seqs))
    return batch, finished


def test_make_scheduler_picks_the_policy() -> None:
    assert isinstance(setup("static", 2)[0], StaticScheduler)
    assert isinstance(setup("continuous", 2)[0], ContinuousScheduler)


def test_static_admits_only_when_the_whole_batch_has_finished() -> None:
    scheduler, pool = setup("static", 2)
    short, long_, late = add(scheduler, 0, 1), add(scheduler, 1, 3), add(scheduler, 2, 1)
    batch, finished = step(scheduler)
    assert batch.is_prefill and batch.seqs == [short, long_] and finished == [short]
    assert short.block_table == []  # freed the moment it finished
    batch, _ = step(scheduler)
    assert not batch.is_prefill and batch.seqs == [long_] and late.status is SequenceStatus.WAITING
    batch, finished = step(scheduler)
    assert finished == [long_]
    batch, finished = step(scheduler)
    assert batch.is_prefill and batch.seqs == [late] and finished == [late]
    assert not scheduler.has_unfinished and pool.num_free_blocks == pool.num_blocks


def test_continuous_admits_as_soon_as_a_slot_frees() -> None:
    scheduler, _ = setup("continuous", 2)
    short, long_, late = add(scheduler, 0, 1), add(scheduler, 1, 3), add(scheduler, 2, 1)
    step(scheduler)
    batch, _ = step(scheduler)
    assert batch.is_prefill and batch.seqs == [late]
    batch, _ = step(scheduler)
    assert batch.seqs == [long_]
    assert short.is_finished and late.is_finished


def test_continuous_admission_stops_at_max_batch_and_when_blocks_run_out() -> None:
    scheduler, _ = setup("continuous", 3)
    for seq_id in range(5):
        add(scheduler, seq_id, 4)
    assert len(scheduler.schedule().seqs) == 3
    scheduler, _ = setup("continuous", 8, num_blocks=16, max_model_len=64)
    for seq_id in range(3):
        add(scheduler, seq_id, 4, prompt_len=24)  # 6 blocks each: only two fit in 16
    assert len(scheduler.schedule().seqs) == 2 and len(scheduler.waiting) == 1


def test_finish_reasons() -> None:
    scheduler, _ = setup("continuous", 2)
    stops, runs_on = add(scheduler, 0, 5, ignore_eos=False), add(scheduler, 1, 2, ignore_eos=True)
    step(scheduler, token=EOS)
    assert stops.finish_reason == "stop" and not runs_on.is_finished
    step(scheduler, token=EOS)
    assert runs_on.finish_reason == "length" and runs_on.num_completion_tokens == 2


def test_preemption_frees_the_newest_and_recomputes_it_later() -> None:
    scheduler, pool = setup("continuous", 4, num_blocks=16, block_size=4, max_model_len=64)
    seqs = [add(scheduler, seq_id, 24, prompt_len=4) for seq_id in range(4)]
    steps = 0
    while scheduler.has_unfinished:
        batch, _ = step(scheduler)
        assert len(batch.seqs) <= 4
        steps += 1
    assert scheduler.num_preemptions > 0
    assert seqs[-1].num_preemptions > 0 and seqs[0].num_preemptions == 0
    assert all(seq.is_finished and seq.num_completion_tokens == 24 for seq in seqs)
    assert pool.num_free_blocks == pool.num_blocks


def test_a_lone_sequence_that_cannot_grow_is_preempted_not_crashed() -> None:
    scheduler, pool = setup("continuous", 2, num_blocks=4, block_size=4, max_model_len=16)
    a = add(scheduler, 0, 5, prompt_len=8)
    b = add(scheduler, 1, 5, prompt_len=8)
    for _ in range(12):
        if not scheduler.has_unfinished:
            break
        step(scheduler)
    assert a.is_finished and b.is_finished and scheduler.num_preemptions >= 1
