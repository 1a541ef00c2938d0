"""The engine's knobs, each declared once: default, command-line flag, what it accepts and what it means.

The experiment's and the server's command lines are derived from these declarations (`add_flags`,
`EngineConfig.from_args`), and the same declarations validate a config built in code, with messages that
say how to fix the input.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from ui.cli import positive_int

POLICIES = ("static", "continuous")
DTYPES = ("float32", "bfloat16")
DEFAULT_BLOCK_SIZE = 16
DEFAULT_NUM_BLOCKS = 1024  # 16,384 token slots: 720 MiB in float32 for SmolLM2-135M
DEFAULT_MAX_MODEL_LEN = 512


@dataclass(frozen=True, slots=True)
class Flag:
    """How one knob is typed on a command line and what values it accepts there and in code."""

    name: str  # as typed: --max-batch
    help: str
    choices: tuple[str, ...] = ()
    whole_positive: bool = False  # a whole number greater than 0

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser, default: Any, **overrides: Any) -> None:
        """A bool knob is a switch; the others take a value, refused by the parser when it is not accepted."""
        if isinstance(default, bool):
            kwargs: dict[str, Any] = {"action": "store_true"}
        else:
            kwargs = {
                "default": default,
                "type": positive_int if self.whole_positive else None,
                "choices": self.choices or None,
            }
        parser.add_argument(self.name, **{**kwargs, "help": self.help, **overrides})

    def problem(self, name: str, value: Any) -> str | None:
        if self.choices and value not in self.choices:
            return f"{name}={value!r} is invalid: use one of {', '.join(self.choices)}"
        if self.whole_positive and value < 1:
            return f"{name}={value} is invalid: use a whole number greater than 0"
        return None


def knob(default: Any, name: str, help: str, **accepts: Any) -> Any:
    return field(default=default, metadata={"flag": Flag(name, help, **accepts)})


THREADS = Flag("--threads", "torch threads (1 is faster when other work shares the cores)", whole_positive=True)


@dataclass(slots=True)
class EngineConfig:
    policy: str = knob(
        "continuous",
        "--policy",
        "static: admit only into an empty batch; continuous: refill a finished seat at the next step",
        choices=POLICIES,
    )
    max_batch_size: int = knob(16, "--max-batch", "the most sequences in one step", whole_positive=True)
    block_size: int = knob(DEFAULT_BLOCK_SIZE, "--block-size", "tokens per KV block", whole_positive=True)
    num_blocks: int = knob(
        DEFAULT_NUM_BLOCKS, "--num-blocks", "KV pool size in blocks (default: %(default)s)", whole_positive=True
    )
    max_model_len: int = knob(
        DEFAULT_MAX_MODEL_LEN,
        "--max-model-len",
        "the longest sequence, prompt and completion, in tokens",
        whole_positive=True,
    )
    enable_prefix_caching: bool = knob(False, "--prefix-caching", "reuse cached KV blocks of shared prefixes")
    dtype: str = knob("float32", "--dtype", "weights and KV cache dtype", choices=DTYPES)

    def __post_init__(self) -> None:
        knobs = [
            (knob_field.name, getattr(self, knob_field.name), knob_field.metadata["flag"])
            for knob_field in fields(self)
        ]
        for name, value, flag in sorted(knobs, key=lambda knob: not knob[2].choices):  # policy, dtype, then numbers
            if problem := flag.problem(name, value):
                raise ValueError(problem)
        if self.num_slots < self.max_model_len:
            needed = -(-self.max_model_len // self.block_size)
            raise ValueError(
                f"num_blocks={self.num_blocks} holds {self.num_slots} tokens, fewer than one "
                f"max_model_len={self.max_model_len} sequence: use num_blocks >= {needed} "
                f"or a smaller max_model_len"
            )

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    @classmethod
    def from_args(cls, args: argparse.Namespace, **values: Any) -> EngineConfig:
        """The config the flags of `add_flags` ask for; `values` sets the knobs a command line gives otherwise."""
        given = {
            knob_field.name: getattr(args, knob_field.metadata["flag"].dest)
            for knob_field in fields(cls)
            if hasattr(args, knob_field.metadata["flag"].dest)
        }
        return cls(**{**given, **values})


def add_flags(parser: argparse.ArgumentParser, names: Iterable[str], **overrides: dict[str, Any]) -> None:
    """One flag per named knob, in declaration order. `overrides` (by knob name) replaces what a command line
    does differently, such as a default that depends on another flag, together with the help that says so."""
    wanted = set(names)
    for knob_field in fields(EngineConfig):
        if knob_field.name in wanted:
            options = {"default": knob_field.default, **overrides.get(knob_field.name, {})}
            knob_field.metadata["flag"].add_to(parser, **options)
