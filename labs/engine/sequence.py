"""One request as the engine sees it: its tokens, its block table, and the moments that matter."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    ignore_eos: bool = False  # keep decoding past end-of-sequence (benchmarks force exact lengths)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens} is invalid: use a whole number greater than 0")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} is invalid: use 0 (greedy) or more")


class Sequence:
    """Token ids (prompt then completion) and the physical KV blocks that hold them, in order.

    Block `i` of `block_table` holds the KV of positions [i * block_size, (i + 1) * block_size).
    `num_cached_tokens` counts the prompt tokens whose KV was found in the prefix cache at admission.
    """

    def __init__(
        self, seq_id: int, prompt_token_ids: list[int], params: SamplingParams, block_size: int, arrival_s: float = 0.0
    ) -> None:
        if not prompt_token_ids:
            raise ValueError(f"request {seq_id} has an empty prompt: send at least one token")
        self.seq_id = seq_id
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.block_size = block_size
        self.block_table: list[int] = []
        self.num_cached_tokens = 0
        self.status = SequenceStatus.WAITING
        self.arrival_s = arrival_s
        self.first_token_s: float | None = None
        self.finished_s: float | None = None
        self.finish_reason: str | None = None
        self.num_preemptions = 0

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_blocks(self) -> int:
        return -(-self.num_tokens // self.block_size)

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def block_token_ids(self, index: int) -> tuple[int, ...]:
        return tuple(self.token_ids[index * self.block_size : (index + 1) * self.block_size])

    def slot(self, position: int) -> int:
        """The physical KV slot of a token position: its block's id times block size, plus the offset."""
        return self.block_table[position // self.block_size] * self.block_size + position % self.block_size

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
