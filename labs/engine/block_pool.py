"""Fixed-size KV blocks: a free queue, reference counts, and a prefix cache of full blocks.

This is the bookkeeping half of PagedAttention. The tensors live in the model runner; here a block is
just an id. Sequences get blocks on demand as they grow and give them back the moment they finish.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from labs.engine.sequence import Sequence

NO_PARENT_HASH = 0  # the chain hash of "nothing before this block"


def chain_hash(parent_hash: int, token_ids: tuple[int, ...]) -> int:
    """A full block's identity: its own tokens and, through the parent's hash, every token before them."""
    return hash((parent_hash, token_ids))


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full and registered in the prefix cache
    token_ids: tuple[int, ...] = field(default=())


class BlockPool:
    """Hands out KV blocks and takes them back.

    Policy of the free queue: least recently freed first. A sequence frees its blocks tail first, so the
    end of a prefix chain is evicted before its beginning. A freed block keeps its hash: until it is
    handed out again, a new sequence with the same prefix can still hit it (a prefix-cache hit on a
    free block takes it back out of the queue).

    "Can't allocate" returns False and changes nothing: the scheduler decides (wait, or preempt).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(block_id) for block_id in range(num_blocks)]
        self.free_block_ids: OrderedDict[int, None] = OrderedDict((block_id, None) for block_id in range(num_blocks))
        self.hash_to_block_id: dict[int, int] = {}
        self.num_prefix_query_tokens = 0
        self.num_prefix_hit_tokens = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def _cached_block_ids(self, seq: Sequence) -> list[int]:
        """Leading full prompt blocks already in the cache, checked token for token. The block holding the
        last token is never taken from the cache: that token is always computed (its logits are needed)."""
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        parent = NO_PARENT_HASH
        for index in range((seq.num_tokens - 1) // self.block_size):
            token_ids = seq.block_token_ids(index)
            parent = chain_hash(parent, token_ids)
            block_id = self.hash_to_block_id.get(parent)
            if block_id is None or self.blocks[block_id].token_ids != token_ids:
                break
            hits.append(block_id)
        return hits

    def allocate(self, seq: Sequence) -> bool:
        """Give `seq` blocks for all its tokens, reusing cached prefix blocks. False if the pool is short."""
        hits = self._cached_block_ids(seq)
        num_new = seq.num_blocks - len(hits)
        num_revived = sum(1 for block_id in hits if self.blocks[block_id].ref_count == 0)
        if num_new + num_revived > self.num_free_blocks:
            return False
        for block_id in hits:
            if self.blocks[block_id].ref_count == 0:
                del self.free_block_ids[block_id]
            self.blocks[block_id].ref_count += 1
        seq.block_table = hits + [self._take_free_block() for _ in range(num_new)]
        seq.num_cached_tokens = len(hits) * self.block_size
        if self.enable_prefix_caching:
            self.num_prefix_query_tokens += seq.num_tokens
            self.num_prefix_hit_tokens += seq.num_cached_tokens
            for index in range(len(hits), seq.num_tokens // self.block_size):
                self._register(seq, index)
        return True

    def can_append(self, seq: Sequence) -> bool:
        """Room for the KV of `seq`'s newest token (a new block only when that token starts one)."""
        return not self._needs_new_block(seq) or self.num_free_blocks > 0

    def append_slot(self, seq: Sequence) -> None:
        """Make room for the newest token's KV; register the block it fills. Call can_append first."""
        if self._needs_new_block(seq):
            seq.block_table.append(self._take_free_block())
        if self.enable_prefix_caching and seq.num_tokens % self.block_size == 0:
            self._register(seq, seq.num_tokens // self.block_size - 1)

    def free(self, seq: Sequence) -> None:
        """Return `seq`'s blocks, tail first; a block goes back to the free queue when no one uses it."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
        seq.block_table = []
        seq.num_cached_tokens = 0

    def _needs_new_block(self, seq: Sequence) -> bool:
        return seq.num_blocks > len(seq.block_table)

    def _take_free_block(self) -> int:
        block_id, _ = self.free_block_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]
        block.hash, block.token_ids, block.ref_count = None, (), 1
        return block_id

    def _register(self, seq: Sequence, index: int) -> None:
        parent = self.blocks[seq.block_table[index - 1]].hash if index > 0 else NO_PARENT_HASH
        if parent is None:  # the chain is broken above this block: it cannot be found by prefix
            return
        block = self.blocks[seq.block_table[index]]
        block.token_ids = seq.block_token_ids(index)
        block.hash = chain_hash(parent, block.token_ids)
        self.hash_to_block_id.setdefault(block.hash, block.block_id)
