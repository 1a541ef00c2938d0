"""The seed study's three readings: sequential vs concurrent (compare), paging and batching (the teaching engine)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labs.engine.study import COLUMNS
from labs.tour.outline import SEED_BATCH, SEED_MAX_LEN_OVER_PAGED
from labs.tour.readings.shapes import Reading, Table, number, ratio, times

SEED_CONTINUOUS_TTFT_P50_MS = 201  # the seed study's continuous TTFT p50 at max batch 16 (labs/engine.md)
SEED_TTFT_RATIOS = {16: 5.1, 32: 21}  # the seed's static / continuous TTFT p50 at these max batches


def read_seed(data: dict[str, Any]) -> Reading:
    by_key = {(row["engine"], row["mode"]): row for row in data["summaries"]}
    scaling = data["scaling"]
    n = data["n"]
    beside = data.get("beside") or {"name": "llamacpp", "described": ""}  # a report from before it was recorded
    other = beside["name"]
    shown = "llama.cpp" if other == "llamacpp" else other
    label = "The kit's Ollama-class llama.cpp server" if other == "llamacpp" else f"Beside it, {other}"

    def wall(engine: str, mode: str) -> float | None:
        row = by_key.get((engine, mode))
        return row["wall_s"] if row else None

    def tok_s(engine: str, mode: str) -> float | None:
        row = by_key.get((engine, mode))
        return row["output_tokens_per_s"] if row else None

    sentences = [
        f"With {n} requests at once, vLLM finished in {number(wall('vllm', 'matched concurrent'), 2)} s what took it "
        f"{number(wall('vllm', 'matched sequential'), 2)} s one after another: {times(scaling.get('vllm'))}, where "
        "the seed measured 3.13x. Continuous batching decodes the requests together.",
        f"{label} took {number(wall(other, 'matched concurrent'), 2)} s for the same "
        f"{n} at once and {number(wall(other, 'matched sequential'), 2)} s one by one "
        f"({times(scaling.get(other))}; the seed's Ollama 1.10x).",
    ]
    if beside["described"]:
        sentences.append(f"Beside vLLM: {beside['described']}.")
    single_vllm, single_other = tok_s("vllm", "matched sequential"), tok_s(other, "matched sequential")
    if single_vllm and single_other:
        faster = shown if single_other > single_vllm else "vLLM"
        sentences.append(
            f"For one user at a time {shown} delivered {number(single_other, 1)} tok/s and vLLM "
            f"{number(single_vllm, 1)}: {faster} is the faster single stream here; with {n} users at once vLLM "
            f"delivered {number(tok_s('vllm', 'matched concurrent'), 1)} tok/s against {shown}'s "
            f"{number(tok_s(other, 'matched concurrent'), 1)}."
        )
    bad = {row["engine"]: row["num_truncated"] + row["num_empty"] + row["num_failed"] for row in data["summaries"]}
    if any(bad.values()):
        sentences.append(
            "Answers cut short or failed (they count for nothing in tok/s): "
            + ", ".join(f"{engine} {count}" for engine, count in bad.items() if count)
            + "."
        )
    rows = [
        (
            row["engine"],
            row["mode"],
            str(row["num_requests"]),
            number(row["wall_s"], 3),
            number(row["output_tokens_per_s"], 1),
            str(row["num_ok"]),
            str(row["num_truncated"] + row["num_empty"] + row["num_failed"]),
            times(scaling.get(row["engine"])) if row["mode"] == "matched concurrent" else "",
        )
        for row in data["summaries"]
    ]
    table = Table(("engine", "mode", "requests", "wall s", "output tok/s", "ok", "cut short/failed", "scaling"), rows)
    headline = f"vLLM {times(scaling.get('vllm'))} vs {shown} {times(scaling.get(other))}"
    return Reading(headline, sentences, [table])


def _study_row(results: Sequence[dict[str, Any]], policy: str) -> dict[str, Any] | None:
    """The policy's row at the seed's max batch, else at the largest max batch the study ran."""
    rows = sorted((row for row in results if row["policy"] == policy), key=lambda row: row["max_batch_size"])
    return next((row for row in rows if row["max_batch_size"] == SEED_BATCH), rows[-1] if rows else None)


def waste(row: dict[str, Any]) -> float:
    """The share of paged KV slots no token filled: the unfilled tail of each sequence's last block."""
    return 1 - row["kv_live_tokens"] / row["kv_paged_slots"] if row["kv_paged_slots"] else 0.0


def read_paging(data: dict[str, Any]) -> Reading:
    study, vllm = data.get("study"), data.get("vllm")
    engine = (
        paging_study(study)
        if study
        else Reading(
            "no teaching-engine study",
            [f"The teaching engine's study did not run: {data.get('study_error', 'no reason recorded')}."],
        )
    )
    pool = (
        vllm_pool(vllm)
        if vllm
        else Reading("", [f"vLLM's pool was not read: {data.get('vllm_error', 'no reason recorded')}."])
    )
    return Reading(engine.headline, engine.sentences + pool.sentences, engine.tables + pool.tables)


def paging_study(study: dict[str, Any]) -> Reading:
    """The teaching engine's KV at its peak step: what paging wasted, and what reserving max_len would have taken."""
    results, args = study["results"], study["args"]
    row = _study_row(results, "continuous") or results[-1]
    running = row["kv_max_len_slots"] // args["max_model_len"]
    sentences = [
        f"At its peak (continuous batching, max batch {row['max_batch_size']}) the teaching engine held "
        f"{row['kv_live_tokens']:,} tokens of KV in {row['kv_paged_slots']:,} paged slots (blocks of "
        f"{args['block_size']}): {waste(row):.1%} of what paging reserved held no token, against the seed's "
        "under 4%.",
        f"Reserving max_len ({args['max_model_len']}) for each of the {running} requests running then would have "
        f"taken {row['kv_max_len_slots']:,} slots, {row['kv_max_len_over_paged']:.1f}x the paged ones (the seed: "
        f"{SEED_MAX_LEN_OVER_PAGED}x).",
    ]
    table = Table(
        ("max batch", "policy", "live tokens", "paged slots", "max_len slots", "waste", "max_len / paged"),
        [
            (
                str(item["max_batch_size"]),
                item["policy"],
                f"{item['kv_live_tokens']:,}",
                f"{item['kv_paged_slots']:,}",
                f"{item['kv_max_len_slots']:,}",
                f"{waste(item):.1%}",
                f"{item['kv_max_len_over_paged']:.1f}x",
            )
            for item in results
        ],
        "The teaching engine's KV at the peak step",
    )
    headline = f"waste {waste(row):.1%}, max_len / paged {row['kv_max_len_over_paged']:.1f}x"
    return Reading(headline, sentences, [table])


def vllm_pool(vllm: dict[str, Any]) -> Reading:
    """vLLM's own KV pool here, against what the sizing lab predicted of it."""
    config, rows = vllm["cache_config"], vllm["rows"]
    matched = sum(row["matches"] for row in rows)
    sentence = (
        f"vLLM's own pool here: {config.get('num_gpu_blocks', '?')} blocks of {config.get('block_size', '?')} "
        f"tokens in {vllm['kv_gib']} GiB ({vllm['dtype']}), handed out a block at a time; the sizing lab "
        f"predicted {matched} of its {len(rows)} reported figures exactly. It runs with max_num_seqs "
        f"{vllm.get('max_num_seqs') or 'unknown'} and max_model_len {vllm.get('max_model_len') or 'unknown'} "
        f"({vllm.get('source') or 'source unknown'})."
    )
    table = Table(
        ("quantity", "source", "predicted", "vLLM reports", ""),
        [
            (
                row["quantity"],
                row["source"],
                row["predicted"],
                row["reported"],
                "match" if row["matches"] else "MISMATCH",
            )
            for row in rows
        ],
        "vLLM's KV pool: the sizing lab's prediction against the running engine",
    )
    return Reading("", [sentence], [table])


def read_batching(data: dict[str, Any]) -> Reading:
    results, args = data["results"], data["args"]
    static, continuous = _study_row(results, "static"), _study_row(results, "continuous")
    rows = [
        (
            str(row["max_batch_size"]),
            row["policy"],
            number(row["output_tokens_per_s"], 1),
            number(row["ttft_p50_ms"]),
            number(row["ttft_p95_ms"]),
            number(row["ttft_p99_ms"]),
            number(row["e2e_p99_s"], 1),
            str(row["num_preemptions"]),
        )
        for row in sorted(results, key=lambda item: (item["max_batch_size"], item["policy"] != "static"))
    ]
    table = Table(
        COLUMNS,
        rows,
        f"{args['requests']} requests at {args['rate']:g}/s (Poisson), through both policies",
    )
    if static is None or continuous is None:
        return Reading("one policy only", ["The study ran one policy only: nothing to compare."], [table])
    ttft = ratio(static["ttft_p50_ms"], continuous["ttft_p50_ms"])
    throughput = ratio(continuous["output_tokens_per_s"], static["output_tokens_per_s"])
    batch = continuous["max_batch_size"]
    sentences = [
        f"At max batch {batch}, continuous batching gave the median request its first token after "
        f"{number(continuous['ttft_p50_ms'])} ms against static batching's {number(static['ttft_p50_ms'])} ms: "
        f"{times(ttft, 1)} lower (the seed: 5.1x).",
        f"It delivered {number(continuous['output_tokens_per_s'], 1)} output tok/s against "
        f"{number(static['output_tokens_per_s'], 1)} ({times(throughput)}; the seed 1.1–1.9x), and its TTFT p99 was "
        f"{number(continuous['ttft_p99_ms'])} ms against {number(static['ttft_p99_ms'])}.",
    ]
    by_key = {(row["policy"], row["max_batch_size"]): row for row in results}
    for other, seed_times in SEED_TTFT_RATIOS.items():
        pair = by_key.get(("static", other)), by_key.get(("continuous", other))
        if other != batch and pair[0] and pair[1]:
            sentences.append(
                f"At max batch {other}: {times(ratio(pair[0]['ttft_p50_ms'], pair[1]['ttft_p50_ms']), 1)} TTFT p50 and "
                f"{times(ratio(pair[1]['output_tokens_per_s'], pair[0]['output_tokens_per_s']))} tok/s (the seed: "
                f"{seed_times}x TTFT p50)."
            )
    behind = continuous["ttft_p50_ms"] / SEED_CONTINUOUS_TTFT_P50_MS
    if behind > 2:
        sentences.append(
            f"Continuous TTFT p50 here is {behind:.0f}x the seed's {SEED_CONTINUOUS_TTFT_P50_MS} ms: {args['rate']:g} "
            "arrivals a second outpace this machine, so the first token waits mostly in the queue under both "
            "policies and the gap is narrower than on the seed's machine, which kept up."
        )
    return Reading(
        f"{times(ttft, 1)} TTFT p50, {times(throughput)} tok/s at max batch {batch}",
        sentences,
        [table],
    )
