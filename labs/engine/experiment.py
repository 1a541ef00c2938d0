"""The seed study: the same Poisson workload through static and continuous batching at several max batches.

    .kit/vllm/bin/python -m labs.engine.experiment                      # 48 requests at 25/s, batches 2..32
    .kit/vllm/bin/python -m labs.engine.experiment --rate 100           # overload
    .kit/vllm/bin/python -m labs.engine.experiment --lengths uniform    # static nearly catches up
    .kit/vllm/bin/python -m labs.engine.experiment --num-blocks 40      # a pool too small: preemptions
    .kit/vllm/bin/python -m labs.engine.experiment --block-size 1       # no fragmentation, huge block tables
    .kit/vllm/bin/python -m labs.engine.experiment --shared-prefix --prefix-caching

Prints the latency table, the continuous/static ratios and the KV table; writes them as JSON for
`labs.engine.plot` (light venv) to draw.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from transformers import AutoTokenizer

from labs.engine import workload
from labs.engine.config import DEFAULT_BLOCK_SIZE, DEFAULT_NUM_BLOCKS, THREADS, EngineConfig, add_flags
from labs.engine.llm_engine import LLMEngine
from labs.engine.model import SmolLM2
from labs.engine.model_runner import DTYPES as TORCH_DTYPES
from labs.engine.replay import SkipIdleClock, replay
from labs.engine.report import print_report, summarize
from labs.engine.sequence import SamplingParams, Sequence
from labs.engine.study import BatchingResult, write_study
from labs.results import Envelope, MeasuredEngine, command_line
from serve.config.model import MODEL_DIR
from serve.config.paths import ROOT
from ui.cli import KitArgumentParser, non_negative_int, positive_float, positive_int

DEFAULT_OUT = ROOT / "results" / "engine" / "study.json"
REPORT_WIDTH_CHARS = 120  # when writing to a file or pipe: wide enough for the tables
WARMUP_TOKENS = 4  # one short generation before timing: first calls pay one-off allocation costs
ENGINE_FLAGS = ("block_size", "num_blocks", "max_model_len", "enable_prefix_caching", "dtype")  # the rest: swept


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = KitArgumentParser(
        prog="python -m labs.engine.experiment", description="Static vs continuous batching on the teaching engine."
    )
    parser.add_argument("--requests", type=positive_int, default=48)
    parser.add_argument("--rate", type=positive_float, default=25.0, help="arrivals per second (Poisson)")
    parser.add_argument(
        "--lengths",
        choices=workload.LENGTH_MIXES,
        default="mixed",
        help="mixed: 80%% ~24 / 20%% ~150 output tokens; uniform: all ~24",
    )
    parser.add_argument("--short-tokens", type=positive_int, default=24, help="output tokens a short request wants (~)")
    parser.add_argument("--long-tokens", type=positive_int, default=150, help="output tokens a long request wants (~)")
    parser.add_argument("--shared-prefix", action="store_true", help="every prompt starts with one long system prompt")
    parser.add_argument("--batches", default="2,4,8,16,32", help="max batch sizes, comma-separated")
    parser.add_argument("--policies", default="static,continuous", help="comma-separated: static, continuous")
    add_flags(
        parser,
        ENGINE_FLAGS,
        num_blocks={
            "default": None,
            "help": f"KV pool size in blocks (default: {DEFAULT_NUM_BLOCKS} blocks of 16 tokens' worth)",
        },
    )
    THREADS.add_to(parser, torch.get_num_threads())
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON results")
    return parser.parse_args(argv)


def configs(args: argparse.Namespace) -> list[EngineConfig]:
    num_blocks = args.num_blocks or DEFAULT_NUM_BLOCKS * DEFAULT_BLOCK_SIZE // args.block_size
    policies = [policy.strip() for policy in args.policies.split(",")]
    try:
        batches = [int(value) for value in args.batches.split(",")]
    except ValueError:
        raise ValueError(f"--batches={args.batches!r} is invalid: use whole numbers separated by commas") from None
    return [
        EngineConfig.from_args(args, policy=policy, max_batch_size=batch, num_blocks=num_blocks)
        for batch in batches
        for policy in policies
    ]


def advancing(progress: Progress, task: TaskID) -> Callable[[Sequence], None]:
    """A replay's on_finished that moves `task` on by one request."""
    return lambda seq: progress.advance(task)


def run(args: argparse.Namespace, console: Console) -> list[BatchingResult]:
    spec = workload.WorkloadSpec(
        num_requests=args.requests,
        rate_per_s=args.rate,
        lengths=args.lengths,
        short_tokens=args.short_tokens,
        long_tokens=args.long_tokens,
        shared_prefix=args.shared_prefix,
        seed=args.seed,
    )
    plan = configs(args)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    requests = workload.build(spec, tokenizer)
    model = SmolLM2(MODEL_DIR, TORCH_DTYPES[args.dtype])
    LLMEngine(plan[0], model).generate(
        [requests[0].prompt_token_ids], SamplingParams(max_tokens=WARMUP_TOKENS, ignore_eos=True)
    )
    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for config in plan:
            task = progress.add_task(f"{config.policy:>10} max batch {config.max_batch_size:>2}", total=len(requests))
            clock = SkipIdleClock()
            engine = LLMEngine(config, model, clock)
            started_s = time.perf_counter()
            seqs = replay(engine, clock, requests, on_finished=advancing(progress, task))
            results.append(summarize(engine, seqs, time.perf_counter() - started_s))
    return results


def main(argv: list[str] | None = None) -> int:
    console = Console(width=None if sys.stdout.isatty() else REPORT_WIDTH_CHARS)
    try:
        args = parse_args(argv)
        torch.set_num_threads(args.threads)
        console.print(
            f"[bold]{args.requests} requests at {args.rate:g}/s[/], lengths {args.lengths}, "
            f"{args.dtype}, {torch.get_num_threads()} threads, blocks of {args.block_size}"
            + (", shared prefix" if args.shared_prefix else "")
            + (", prefix caching" if args.prefix_caching else "")
        )
        results = run(args, console)
    except ValueError as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        return 2
    print_report(console, results, args.block_size, args.max_model_len)
    envelope = Envelope.now(
        command_line("python -m labs.engine.experiment", sys.argv[1:] if argv is None else argv),
        [MeasuredEngine(MODEL_DIR.name, kind="teaching-engine")],
    )
    write_study(
        args.out,
        envelope,
        {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
        results,
    )
    console.print(f"wrote {args.out} — plot it with: .venv/bin/python -m labs.engine.plot {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
