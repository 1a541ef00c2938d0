"""From a scheduled batch to next tokens: block tables become slot numbers, the model runs, tokens are sampled.

The paged part in one sentence: a token at position p of a sequence lives in slot
`block_table[p // block_size] * block_size + p % block_size` of a flat per-layer cache, so a sequence's
context is gathered with one index_select per layer, whatever blocks it happens to own.
"""

from __future__ import annotations

import torch

from labs.engine.config import EngineConfig
from labs.engine.model import SmolLM2, StepInputs
from labs.engine.scheduler import ScheduledBatch
from labs.engine.sequence import Sequence

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class ModelRunner:
    def __init__(self, model: SmolLM2, config: EngineConfig) -> None:
        if DTYPES[config.dtype] != model.dtype:
            raise ValueError(
                f"dtype={config.dtype!r} but the model was loaded as {model.dtype}: load it with the same dtype"
            )
        self.model = model
        self.kv_cache = model.new_kv_cache(config.num_slots)
        self.scratch_slot = config.num_slots  # padding writes here and reads from here, always masked

    def run(self, batch: ScheduledBatch) -> list[int]:
        logits = self.model.forward(self.prepare(batch), self.kv_cache)
        return self.sample(logits, batch.seqs)

    def prepare(self, batch: ScheduledBatch) -> StepInputs:
        if batch.is_prefill:
            starts = [seq.num_cached_tokens for seq in batch.seqs]
        else:
            starts = [seq.num_tokens - 1 for seq in batch.seqs]
        num_new = max(seq.num_tokens - start for seq, start in zip(batch.seqs, starts, strict=True))
        num_context = max(seq.num_tokens for seq in batch.seqs)
        token_ids, positions, write_slots, context_slots, last_index = [], [], [], [], []
        for seq, start in zip(batch.seqs, starts, strict=True):
            pad_new = num_new - (seq.num_tokens - start)
            token_ids.append(seq.token_ids[start:] + [0] * pad_new)
            positions.append(list(range(start, seq.num_tokens)) + [0] * pad_new)
            write_slots.extend([seq.slot(p) for p in range(start, seq.num_tokens)] + [self.scratch_slot] * pad_new)
            context_slots.extend(
                [seq.slot(p) for p in range(seq.num_tokens)] + [self.scratch_slot] * (num_context - seq.num_tokens)
            )
            last_index.append(seq.num_tokens - start - 1)
        positions_t = torch.tensor(positions)
        return StepInputs(
            token_ids=torch.tensor(token_ids),
            positions=positions_t,
            write_slots=torch.tensor(write_slots),
            context_slots=torch.tensor(context_slots),
            attn_bias=self._attn_bias(batch.seqs, positions_t, num_context),
            last_index=torch.tensor(last_index),
        )

    def _attn_bias(self, seqs: list[Sequence], positions: torch.Tensor, num_context: int) -> torch.Tensor:
        """Causal within the context, nothing past a sequence's own length. Padded queries (position 0)
        see key 0 only, so no row is all -inf."""
        keys = torch.arange(num_context)
        lengths = torch.tensor([seq.num_tokens for seq in seqs])
        allowed = (keys <= positions.unsqueeze(-1)) & (keys < lengths.view(-1, 1, 1))  # [B, T, L]
        bias = torch.zeros(allowed.shape, dtype=self.model.dtype).masked_fill_(~allowed, float("-inf"))
        return bias.unsqueeze(1).repeat(1, 1, self.model.shape.group_size, 1)

    @staticmethod
    def sample(logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        greedy = logits.argmax(dim=-1)
        temperatures = [seq.params.temperature for seq in seqs]
        if not any(temperatures):
            return greedy.tolist()
        scale = torch.tensor([t if t > 0 else 1.0 for t in temperatures]).unsqueeze(1)
        sampled = torch.multinomial(torch.softmax(logits / scale, dim=-1), 1).squeeze(1)
        chosen = torch.where(torch.tensor([t > 0 for t in temperatures]), sampled, greedy)
        return chosen.tolist()
