"""The engine's knobs, validated once with messages that say how to fix them."""

from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("static", "continuous")
DTYPES = ("float32", "bfloat16")
DEFAULT_BLOCK_SIZE = 16
DEFAULT_NUM_BLOCKS = 1024  # 16,384 token slots: 720 MiB in float32 for SmolLM2-135M
DEFAULT_MAX_MODEL_LEN = 512


@dataclass(slots=True)
class EngineConfig:
    policy: str = "continuous"
    max_batch_size: int = 16
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int = DEFAULT_NUM_BLOCKS
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    enable_prefix_caching: bool = False
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy={self.policy!r} is invalid: use one of {', '.join(POLICIES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is invalid: use one of {', '.join(DTYPES)}")
        for name in ("max_batch_size", "block_size", "num_blocks", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} is invalid: use a whole number greater than 0")
        if self.num_slots < self.max_model_len:
            needed = -(-self.max_model_len // self.block_size)
            raise ValueError(f"num_blocks={self.num_blocks} holds {self.num_slots} tokens, fewer than one "
                             f"max_model_len={self.max_model_len} sequence: use num_blocks >= {needed} "
                             f"or a smaller max_model_len")

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size
