"""The quality comparison as one function: the engines in (the first is the reference), each one's weights,
perplexity on the lab's text and greedy answers' agreement out, the results written. `python -m labs.quantization`
builds a `Quality` from its command line; the tour builds one from its sizes.

Every engine answers before any is scored (`EndpointError`: nothing measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from client.endpoint import Endpoint
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
from ui.progress import console, step


@dataclass(frozen=True, slots=True)
class Quality:
    """The engines to score (the first is the reference), how much of the text, where the results go."""

    endpoints: Sequence[Endpoint]
    out: Path
    command: str
    windows: int | None = None  # score only the text's first N windows of 1,000 tokens; None: all of it

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("no engine to score: give at least one --url")
        if self.windows is not None and self.windows <= 0:
            raise ValueError(f"--windows {self.windows} is invalid: give at least 1 window")


@dataclass(frozen=True, slots=True)
class Scored:
    """What results.json holds under its envelope (the reference's dtype, one row per engine), and where."""

    payload: dict[str, Any]
    path: Path


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


def score(config: Quality) -> Scored:
    """Each engine in turn: its weights, its perplexity on the text (shown window by window), its greedy answers."""
    endpoints = config.endpoints
    for endpoint in endpoints:
        endpoint.check()
    engines = [served(endpoint.root_url, endpoint, require_metrics=False) for endpoint in endpoints]
    rows: list[dict[str, Any]] = []
    reference_tokens: list[list[int]] = []
    text_ids = tokenize(endpoints[0], EVAL_TEXT.read_text())
    for endpoint, engine in zip(endpoints, engines, strict=True):
        console.print(
            f"{endpoint.base_url}: perplexity on {EVAL_TEXT.name} ({len(text_ids):,} tokens), then "
            f"{len(AGREEMENT_PROMPTS)} greedy answers ..."
        )
        kind, mb = weights(engine)
        with step(f"  scoring {endpoint.name}") as update:
            scored = perplexity(endpoint, text_ids, max_windows=config.windows, progress=update)
            update("the greedy answers")
            answers = [tokenize(endpoints[0], answer) for answer in greedy_answers(endpoint)]
        reference_tokens = reference_tokens or answers
        rows.append(
            {
                "url": endpoint.base_url,
                "weights": kind,
                "mb_per_step": mb,
                "perplexity": asdict(scored),
                "agreement": asdict(agreement(reference_tokens, answers)),
            }
        )
    show(rows)
    envelope = results.Envelope.now(
        config.command, [results.MeasuredEngine(endpoint.model, endpoint.base_url, "vllm") for endpoint in endpoints]
    )
    dtype = engines[0].dtype or "not recorded (an engine the kit did not start)"  # the first engine's, the reference
    payload = {"dtype": dtype, "engines": rows}
    path = results.write(config.out, envelope, payload)
    console.print(f"results: {path}")
    return Scored(payload, path)


def show(rows: list[dict[str, Any]]) -> None:
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
        value, agreed = row["perplexity"]["value"], Agreement(**row["agreement"])
        out.add_row(
            row["url"].removeprefix("http://"),
            row["weights"],
            f"{row['mb_per_step']:.0f}" if row["mb_per_step"] else "?",
            f"{value:.3f}",
            f"{100 * (value / first - 1):+.2f}%",
            f"{agreed.num_identical}/{agreed.num_prompts}",
            f"{100 * agreed.shared_prefix_share:.0f}%",
        )
    console.print(out)
