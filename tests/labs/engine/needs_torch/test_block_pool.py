"""Block pool: allocation on demand, freeing, exhaustion, reference counts and the prefix cache."""

from __future__ import annotations

import pytest

from labs.engine import block_pool as block_pool_module
from labs.engine.block_pool import BlockPool
from labs.engine.sequence import SamplingParams, Sequence

BLOCK = 4


def seq(tokens: list[int], seq_id: int = 0) -> Sequence:
    return Sequence(seq_id, tokens, SamplingParams(max_tokens=8), BLOCK)


def test_allocation_gives_each_sequence_its_own_blocks_for_every_token() -> None:
    pool = BlockPool(num_blocks=8, block_size=BLOCK)
    a, b = seq(list(range(10))), seq(list(range(5)), 1)
    assert pool.allocate(a) and pool.allocate(b)
    assert len(a.block_table) == 3 and len(b.block_table) == 2
    assert not set(a.block_table) & set(b.block_table)
    assert pool.num_free_blocks == 3 and pool.num_used_blocks == 5
    assert [pool.blocks[i].ref_count for i in a.block_table] == [1, 1, 1]
    assert a.slot(9) == a.block_table[2] * BLOCK + 1


def test_a_new_block_only_when_the_newest_token_starts_one() -> None:
    pool = BlockPool(num_blocks=3, block_size=BLOCK)
    s = seq([1, 2, 3, 4])
    pool.allocate(s)
    s.append_token(5)  # position 4 starts block 1
    assert pool.can_append(s)
    pool.append_slot(s)
    assert len(s.block_table) == 2
    for token in (6, 7, 8):  # positions 5..7 fit in block 1
        s.append_token(token)
        pool.append_slot(s)
    assert len(s.block_table) == 2 and pool.num_free_blocks == 1


def test_freeing_returns_blocks_tail_first_and_resets_the_sequence() -> None:
    pool = BlockPool(num_blocks=4, block_size=BLOCK)
    s = seq(list(range(12)))
    pool.allocate(s)
    table = list(s.block_table)
    pool.free(s)
    assert s.block_table == [] and pool.num_free_blocks == 4
    assert list(pool.free_block_ids)[-3:] == table[::-1]


def test_exhaustion_returns_false_and_changes_nothing() -> None:
    pool = BlockPool(num_blocks=2, block_size=BLOCK)
    big = seq(list(range(9)))  # needs 3 blocks
    assert not pool.allocate(big)
    assert big.block_table == [] and pool.num_free_blocks == 2
    full = seq(list(range(8)))
    assert pool.allocate(full)
    full.append_token(99)  # position 8 needs a third block
    assert not pool.can_append(full)


def test_prefix_hit_shares_blocks_with_reference_counts() -> None:
    pool = BlockPool(num_blocks=8, block_size=BLOCK, enable_prefix_caching=True)
    prefix = list(range(100, 108))  # two full blocks
    a, b = seq(prefix + [1, 2]), seq(prefix + [3], 1)
    assert pool.allocate(a) and pool.allocate(b)
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert b.num_cached_tokens == 8
    assert [pool.blocks[i].ref_count for i in a.block_table[:2]] == [2, 2]
    pool.free(a)
    assert [pool.blocks[i].ref_count for i in b.block_table[:2]] == [1, 1]
    assert not set(b.block_table) & set(pool.free_block_ids)
    pool.free(b)
    assert pool.num_free_blocks == 8
    assert pool.num_prefix_hit_tokens == 8 and pool.num_prefix_query_tokens == 19


def test_the_hash_is_chained_so_equal_blocks_after_different_prefixes_do_not_hit() -> None:
    pool = BlockPool(num_blocks=8, block_size=BLOCK, enable_prefix_caching=True)
    a, b = seq([1, 1, 1, 1, 7, 7, 7, 7, 0]), seq([2, 2, 2, 2, 7, 7, 7, 7, 0], 1)
    pool.allocate(a)
    pool.allocate(b)
    assert b.num_cached_tokens == 0 and not set(a.block_table) & set(b.block_table)


def test_a_hash_collision_is_caught_by_comparing_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_pool_module, "chain_hash", lambda parent, tokens: 42)  # fake: every block collides
    pool = BlockPool(num_blocks=8, block_size=BLOCK, enable_prefix_caching=True)
    a, b = seq([1, 2, 3, 4, 0]), seq([5, 6, 7, 8, 0], 1)
    pool.allocate(a)
    pool.allocate(b)
    assert b.num_cached_tokens == 0 and b.block_table[0] != a.block_table[0]


def test_a_freed_block_keeps_its_hash_until_it_is_reused() -> None:
    pool = BlockPool(num_blocks=3, block_size=BLOCK, enable_prefix_caching=True)
    a = seq([1, 2, 3, 4, 5])
    pool.allocate(a)
    cached = a.block_table[0]
    pool.free(a)
    again = seq([1, 2, 3, 4, 6], 1)
    assert pool.allocate(again) and again.block_table[0] == cached and again.num_cached_tokens == BLOCK
    assert cached not in pool.free_block_ids
    pool.free(again)
    other = seq(list(range(20, 32)), 2)  # takes all three blocks: the cached one is evicted
    assert pool.allocate(other)
    assert cached in other.block_table
    late = seq([1, 2, 3, 4, 7], 3)
    pool.free(other)
    pool.allocate(late)
    assert late.num_cached_tokens == 0


def test_the_block_holding_the_last_prompt_token_is_always_computed() -> None:
    pool = BlockPool(num_blocks=8, block_size=BLOCK, enable_prefix_caching=True)
    a = seq(list(range(8)))
    pool.allocate(a)
    b = seq(list(range(8)), 1)
    pool.allocate(b)
    assert b.num_cached_tokens == BLOCK and b.block_table[1] != a.block_table[1]
