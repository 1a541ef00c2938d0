"""`python -m labs.sizing kv|fit|verify`: KV-cache sizing forwards, backwards, and against a live vLLM."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx
from rich.table import Table

from client.endpoint import EndpointError
from labs.served import served
from labs.sizing.verify import compare, inputs
from serve.config.model import bundled_model_facts, model_facts_for
from serve.config.settings import Settings
from serve.config.sizing import (
    KV_DTYPE_BYTES,
    V0_BLOCK_SIZE,
    V1_CPU_BLOCK_SIZE,
    V1_GPU_BLOCK_SIZE,
    VLLM_CPU_OVERHEAD_BYTES,
    VLLM_GPU_OVERHEAD_BYTES,
    WEIGHT_BYTES_PER_PARAM,
    GiB,
    ModelFacts,
    SizingError,
    fit_memory_cap,
    kv_pool,
    load_model_facts,
    parse_memory_size,
)
from serve.engines.runtimes import VLLM
from serve.processes.metrics import NoMetrics
from ui.cli import KitArgumentParser, fraction, non_negative_float, positive_float, positive_int
from ui.progress import console, fail
from ui.values import OLLAMA_PREFIX, SettingsError

FIRST_LENGTH_TOKENS = 512  # the fit table's shortest max_model_len; each next row doubles it
SHOWN_LENGTHS = 9


def facts_for(model: str | None) -> ModelFacts:
    """--model's facts: a folder or config.json; a .gguf file or ollama:<name>[:<tag>] from its header, as the
    preflight reads MODEL_PATH's (nothing downloaded or prepared); else the kit's model."""
    if model and (model.startswith(OLLAMA_PREFIX) or model.endswith(".gguf")):
        facts = model_facts_for(Settings.from_env({"MODEL_PATH": model}), "native")
        if facts is not None:
            return facts
    return load_model_facts(model) if model else bundled_model_facts()


def table(*columns: str) -> Table:
    return Table(*columns, box=None, pad_edge=False, header_style="bold")


def describe_model(facts: ModelFacts) -> None:
    console.print(
        f"[bold]{facts.name}[/bold]: {facts.num_layers} layers, {facts.num_kv_heads} KV heads x "
        f"head_dim {facts.head_dim}, context {facts.max_position_embeddings or '?'} tokens, "
        f"{facts.num_params:,} parameters ({facts.params_source})"
    )


def kv(args: argparse.Namespace) -> int:
    facts = facts_for(args.model)
    block_size = V0_BLOCK_SIZE if args.v0 else args.block_size
    pool = kv_pool(facts, args.dtype, int(args.kv_gib * GiB), block_size)
    describe_model(facts)
    out = table("quantity", "value", "how")
    out.add_row(
        "bytes per token",
        f"{pool.bytes_per_token:,}",
        f"2 x {facts.num_layers} x {facts.num_kv_heads} x {facts.head_dim} x "
        f"{KV_DTYPE_BYTES[args.dtype]} B ({args.dtype})",
    )
    out.add_row("bytes per block", f"{pool.bytes_per_block:,}", f"x {block_size} tokens per block")
    out.add_row("blocks", f"{pool.num_blocks:,}", f"{args.kv_gib:g} GiB / bytes per block, rounded down")
    out.add_row("KV tokens", f"{pool.num_tokens:,}", "blocks x block size")
    out.add_row(
        f"max concurrency at {args.max_model_len:,}",
        f"{pool.max_concurrency(args.max_model_len):.2f}x",
        f"blocks / {pool.blocks_per_sequence(args.max_model_len)} blocks per sequence",
    )
    console.print(out)
    return 0


def fit(args: argparse.Namespace) -> int:
    facts = facts_for(args.model)
    if args.gpu_gib is not None:
        cap = int(args.gpu_gib * GiB * args.utilization)
        overhead = int(args.overhead_gib * GiB) if args.overhead_gib is not None else VLLM_GPU_OVERHEAD_BYTES
        block_size, whole_gib, where = V1_GPU_BLOCK_SIZE, False, f"{args.gpu_gib:g} GiB GPU x {args.utilization:g}"
    else:
        cap = parse_memory_size(args.memory)
        overhead = int(args.overhead_gib * GiB) if args.overhead_gib is not None else VLLM_CPU_OVERHEAD_BYTES
        block_size, whole_gib, where = args.block_size, True, f"a {args.memory} memory cap"
    result = fit_memory_cap(facts, args.weights, cap, overhead, block_size, whole_gib=whole_gib)
    describe_model(facts)
    console.print(
        f"Under {where}: weights {result.weight_bytes / GiB:.2f} GiB ({args.weights}) + runtime "
        f"~{overhead / GiB:.2f} GiB leave {result.kv_budget_bytes / GiB:.2f} GiB for the KV cache"
    )
    if not result.fits:
        unit = "a whole GiB" if whole_gib else "a single block"
        console.print(
            f"[bold red]does not fit:[/bold red] {facts.name} in {args.weights} plus the runtime leave "
            f"less than {unit} of KV cache under {cap / GiB:.2f} GiB: raise the cap or quantize the "
            f"weights further"
        )
        return 1
    pool = result.pool
    budget = (
        f"VLLM_CPU_KVCACHE_SPACE={result.kv_budget_bytes // GiB}"
        if whole_gib
        else f"a KV budget of {result.kv_budget_bytes / GiB:.2f} GiB (--gpu-memory-utilization {args.utilization:g})"
    )
    console.print(
        f"Set {budget}: {pool.num_blocks:,} blocks of {block_size} = {pool.num_tokens:,} tokens "
        f"= the most MAX_MODEL_LEN x MAX_NUM_SEQS can be"
    )
    out = table("MAX_MODEL_LEN", "MAX_NUM_SEQS (all at full length)", "max concurrency")
    length = FIRST_LENGTH_TOKENS
    for _ in range(SHOWN_LENGTHS):
        if facts.max_position_embeddings and length > facts.max_position_embeddings:
            break
        seqs = pool.max_num_seqs(length)
        out.add_row(f"{length:,}", f"{seqs:,}" if seqs else "0: does not fit", f"{pool.max_concurrency(length):.2f}x")
        length *= 2
    console.print(out)
    return 0


def verify(args: argparse.Namespace) -> int:
    """Predict from the served model, its dtype and KV budget as the engine was started (the record `up` wrote; a flag
    overrides each), then compare with what the engine reports."""
    url = args.url or VLLM.base_url(Settings.load())  # where to look: GPU_PORT for the GPU track
    try:
        engine = served(url, log_path=Path(args.log) if args.log else None)
    except NoMetrics:
        fail(f"{url} exposes no vLLM /metrics: this engine exposes no metrics to verify against", code=1)
    model = facts_for(args.model) if args.model else None
    given = inputs(engine, model, args.dtype, args.kv_gib)
    facts, dtype, budget = given.facts, given.dtype, given.kv_budget_bytes
    seqs = "unknown (vLLM does not report it)" if engine.max_num_seqs is None else engine.max_num_seqs
    console.print(
        f"The engine runs with max_num_seqs {seqs}, max_model_len {engine.max_model_len}: from {given.source}; "
        f"dtype {dtype} from {given.dtype_source}"
    )
    rows = compare(facts, dtype, budget, engine)
    console.print(f"Predicted for {facts.name} in {dtype} with {budget / GiB:g} GiB vs what {url} reports:")
    out = table("quantity", "source", "predicted", "vLLM", "")
    for row in rows:
        out.add_row(
            row.quantity,
            row.source,
            row.predicted,
            row.reported,
            "[green]match[/green]" if row.matches else "[red]MISMATCH[/red]",
        )
    console.print(out)
    return 0 if all(row.matches for row in rows) else 1


def parser() -> argparse.ArgumentParser:
    top = KitArgumentParser(prog="python -m labs.sizing", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    model_help = (
        "a model directory or config.json, a .gguf file, or ollama:<name>[:<tag>] from your Ollama (default: the kit's "
        "SmolLM2-135M-Instruct)"
    )

    forward = sub.add_parser("kv", help="bytes per token, blocks, tokens and concurrency of a KV budget")
    forward.add_argument("--model", help=model_help)
    forward.add_argument("--dtype", choices=KV_DTYPE_BYTES, default="float32")
    forward.add_argument("--kv-gib", type=positive_float, default=1.0, help="the KV budget (VLLM_CPU_KVCACHE_SPACE)")
    forward.add_argument("--max-model-len", type=positive_int, default=1024)
    forward.add_argument("--block-size", type=positive_int, default=V1_CPU_BLOCK_SIZE, help="V1 on CPU: 128")
    forward.add_argument("--v0", action="store_true", help="vLLM V0's 16-token blocks")
    forward.set_defaults(run=kv)

    backwards = sub.add_parser("fit", help="what fits under a memory cap, and the KV budget to set")
    backwards.add_argument("--model", help=model_help)
    backwards.add_argument("--weights", choices=WEIGHT_BYTES_PER_PARAM, default="bf16")
    backwards.add_argument("--memory", default="5g", help="a container cap, as MEMORY_LIMIT (5g, 8192m)")
    backwards.add_argument("--gpu-gib", type=positive_float, help="size a GPU instead: its memory in GiB")
    backwards.add_argument("--utilization", type=fraction, default=0.9, help="--gpu-memory-utilization")
    backwards.add_argument("--overhead-gib", type=non_negative_float, help="runtime memory beyond weights and KV")
    backwards.add_argument("--block-size", type=positive_int, default=V1_CPU_BLOCK_SIZE)
    backwards.set_defaults(run=fit)

    check = sub.add_parser("verify", help="compare the prediction with a running vLLM's /metrics and log")
    check.add_argument("--url", help="the engine without /v1 (default: from .env)")
    check.add_argument("--model", help=model_help)
    check.add_argument("--dtype", choices=KV_DTYPE_BYTES, help="default: the dtype up started it with")
    check.add_argument("--kv-gib", type=positive_float, help="default: the KV budget up started it with")
    check.add_argument("--log", help="the server's log (default: the one up recorded; none for another engine)")
    check.set_defaults(run=verify)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (SizingError, SettingsError) as exc:
        fail(str(exc), code=2)
    except EndpointError as exc:
        fail(str(exc), code=1)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the engine: {exc}; is it up (bash up.sh) and is --url right?", code=1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
