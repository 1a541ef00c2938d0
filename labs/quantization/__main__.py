"""`python -m labs.quantization`: what a quantized checkpoint costs in quality next to the float one.

Give it the engines to compare (--url, the first is the reference): each one's weights (the folder vLLM
lists as its model's root, read here on this machine) and the bytes a decode step reads of them, perplexity on
the lab's fixed text, and how often its greedy answers match the reference's. Speed is the benchmark's job
(labs/quantization.md gives its command).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.table import Table

from client.endpoint import Endpoint, EndpointError
from labs import results
from labs.quantization.quality import (
    AGREEMENT_PROMPTS,
    EVAL_TEXT,
    Agreement,
    agreement,
    greedy_answers,
    perplexity,
    tokenize,
)
from labs.served import Served, served
from serve.config.environment import load_env
from serve.config.settings import Settings
from ui.cli import KitArgumentParser, positive_int
from ui.progress import console, fail, step
from ui.values import SettingsError

DEFAULT_OUT = Path("results") / "quantization.json"


def weights(engine: Served) -> tuple[str, float | None]:
    """The weights' format ('int8 W8A8 ...' or the dtype) and the MB a decode step reads, as `up` recorded them; for
    an engine the kit did not start, what its folder says (the dtype is not reported: MB unknown)."""
    recorded = engine.record.weights if engine.record is not None else None
    if recorded is not None:
        return recorded.format, None if recorded.num_bytes is None else recorded.num_bytes / 1e6
    facts = engine.model_facts
    if facts is None:
        return f"? ({engine.model_root or 'no root listed'})", None
    return ("int8 W8A8" if facts.num_int8_params else "float"), None


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m labs.quantization", description=__doc__)
    parser.add_argument(
        "--url",
        action="append",
        help="an engine's /v1 URL; repeat it (default: the kit's vLLM); the first is the reference",
    )
    parser.add_argument("--model", help="the model name (default: MODEL_NAME)")
    parser.add_argument("--windows", type=positive_int, help="score only the text's first N windows of 1,000 tokens")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results file (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        settings = Settings.load()
    except SettingsError as exc:
        fail(str(exc), code=2)
    env = load_env()
    endpoints = [
        Endpoint.at(
            f"engine {index}", url, args.model or settings.model_name, env, url_source="--url", model_source="--model"
        )
        for index, url in enumerate(args.url or [f"{settings.base_url}/v1"], 1)
    ]
    rows: list[dict[str, Any]] = []  # one per engine, as results.json keeps it
    try:
        for endpoint in endpoints:
            endpoint.check()
        engines = [served(endpoint.root_url, endpoint, require_metrics=False) for endpoint in endpoints]
        reference_tokens: list[list[int]] = []
        text_ids = tokenize(endpoints[0], EVAL_TEXT.read_text())
        for endpoint, engine in zip(endpoints, engines, strict=True):
            console.print(
                f"{endpoint.base_url}: perplexity on {EVAL_TEXT.name} ({len(text_ids):,} tokens), then "
                f"{len(AGREEMENT_PROMPTS)} greedy answers ..."
            )
            kind, mb = weights(engine)
            with step(f"  scoring {endpoint.name}") as update:
                score = perplexity(endpoint, text_ids, max_windows=args.windows, progress=update)
                update("the greedy answers")
                answers = [tokenize(endpoints[0], answer) for answer in greedy_answers(endpoint)]
            reference_tokens = reference_tokens or answers
            rows.append(
                {
                    "url": endpoint.base_url,
                    "weights": kind,
                    "mb_per_step": mb,
                    "perplexity": asdict(score),
                    "agreement": asdict(agreement(reference_tokens, answers)),
                }
            )
    except EndpointError as exc:
        fail(str(exc), code=1)
    show(rows)
    envelope = results.Envelope.now(
        results.command_line("labs.quantization", sys.argv[1:] if argv is None else argv),
        [results.MeasuredEngine(args.model or settings.model_name, row["url"], "vllm") for row in rows],
    )
    dtype = engines[0].dtype or "not recorded (an engine the kit did not start)"  # the first engine's, the reference
    console.print(f"results: {results.write(args.out, envelope, {'dtype': dtype, 'engines': rows})}")
    return 0


def show(rows: list[dict]) -> None:
    out = Table(
        "engine",
        "weights",
        "MB read per step",
        "perplexity",
        "vs first",
        "greedy answers identical",
        "shared prefix",
        box=None,
        pad_edge=False,
        header_style="bold",
    )
    first = rows[0]["perplexity"]["value"]
    for row in rows:
        score, agreed = row["perplexity"]["value"], Agreement(**row["agreement"])
        out.add_row(
            row["url"].removeprefix("http://"),
            row["weights"],
            f"{row['mb_per_step']:.0f}" if row["mb_per_step"] else "?",
            f"{score:.3f}",
            f"{100 * (score / first - 1):+.2f}%",
            f"{agreed.num_identical}/{agreed.num_prompts}",
            f"{100 * agreed.shared_prefix_share:.0f}%",
        )
    console.print(out)


if __name__ == "__main__":
    sys.exit(main())
