"""The serving readings: load (the load tester and the doctor), quantization, the contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labs.tour.outline import quantization_measured
from labs.tour.readings.shapes import Reading, Table, number, ratio, times

SATURATED = 0.8  # throughput grew by less than this share of the offered load's growth: the engine saturated
SHOWN_DIFFERENCES = 3


def read_load(data: dict[str, Any]) -> Reading:
    points = sorted(data["points"], key=lambda point: point["rate"])
    first, last = points[0], points[-1]
    sentences = [latency_sentence(first, last), throughput_sentence(points), *metrics_sentences(last)]
    limits = data.get("limits")
    if limits:
        seqs = limits.get("max_num_seqs")
        sentences.append(
            f"The doctor judged against what the engine runs with: max_num_seqs {seqs if seqs else 'unknown'}, "
            f"max_model_len {number(limits.get('max_model_len'))} ({data.get('limits_source') or 'source unknown'})."
        )
    headline = (
        f"TTFT p50 {number(stat(first, 'ttft_ms', 'median'))} → {number(stat(last, 'ttft_ms', 'median'))} ms "
        f"from {first['rate']:g} to {last['rate']:g} req/s"
    )
    return Reading(headline, sentences, [load_table(points, data["lengths"])])


def stat(point: dict[str, Any], metric: str, which: str) -> float | None:
    return point["summary"][metric][which]


def latency_sentence(first: dict[str, Any], last: dict[str, Any]) -> str:
    return (
        f"At {first['rate']:g} req/s the median request waited {number(stat(first, 'ttft_ms', 'median'))} ms for its "
        f"first token (p99 {number(stat(first, 'ttft_ms', 'p99'))}); at {last['rate']:g} req/s, "
        f"{number(stat(last, 'ttft_ms', 'median'))} ms (p99 {number(stat(last, 'ttft_ms', 'p99'))}), and each later "
        f"token took {number(stat(first, 'tpot_ms', 'median'), 1)} → {number(stat(last, 'tpot_ms', 'median'), 1)} ms "
        "(TPOT p50)."
    )


def throughput_sentence(points: list[dict[str, Any]]) -> str:
    """How output throughput followed the offered load: kept up, saturated with a queue, or ran out of requests."""
    first, last = points[0], points[-1]
    grew = ratio(last["summary"]["output_tokens_per_s"], first["summary"]["output_tokens_per_s"])
    offered = last["rate"] / first["rate"]
    waited = max(((point.get("peaks") or {}).get("max_waiting") or 0.0) for point in points)
    if grew is not None and grew >= SATURATED * offered:
        verdict = "offered load): the engine kept up."
    elif waited:
        verdict = f"offered load): the engine saturated, and requests queued in it (up to {waited:g} waiting)."
    else:
        verdict = (
            "offered load), though nothing waited in the engine: with "
            f"{last['summary']['num_requests']} requests a point, the last answers set a run's length as much as "
            "the rate does."
        )
    return (
        f"Output throughput went from {number(first['summary']['output_tokens_per_s'], 1)} to "
        f"{number(last['summary']['output_tokens_per_s'], 1)} tok/s ({times(grew, 1)} for {offered:.0f}x the " + verdict
    )


def metrics_sentences(last: dict[str, Any]) -> list[str]:
    """What /metrics and the doctor said at the busiest point, or why there is no series."""
    doctor, peaks = last.get("doctor"), last.get("peaks")
    if doctor and peaks:
        kv = peaks["max_kv_usage"]
        return [
            f"At the busiest moment of {last['rate']:g} req/s, /metrics showed up to {peaks['max_running']:g} running "
            f"and {peaks['max_waiting']:g} waiting with KV usage up to "
            f"{number(kv * 100 if kv is not None else None, 1, '%')}; the doctor read it as "
            f"{doctor['advice'].rstrip('.')}."
        ]
    return [f"No /metrics series: {last['metrics_note']}"] if last.get("metrics_note") else []


LOAD_COLUMNS = (
    "req/s",
    "ok",
    "output tok/s",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "running",
    "waiting",
    "KV",
)


def load_table(points: list[dict[str, Any]], lengths: str) -> Table:
    rows = []
    for point in points:
        summary, peaks = point["summary"], point.get("peaks") or {}
        kv = peaks.get("max_kv_usage")
        rows.append(
            (
                f"{point['rate']:g}",
                f"{summary['num_ok']}/{summary['num_requests']}",
                number(summary["output_tokens_per_s"], 1),
                number(summary["ttft_ms"]["median"]),
                number(summary["ttft_ms"]["p99"]),
                number(summary["tpot_ms"]["median"], 1),
                number(summary["tpot_ms"]["p99"], 1),
                number(peaks.get("max_running")),
                number(peaks.get("max_waiting")),
                number(kv * 100 if kv is not None else None, 1, "%"),
                (point.get("doctor") or {}).get("state", "—"),
            )
        )
    return Table(
        (*LOAD_COLUMNS, "doctor"),
        rows,
        f"Poisson arrivals, lengths {lengths}; latencies in ms; running, waiting and KV: the peaks /metrics showed",
    )


def users_text(users: str) -> str:
    return f"{users} user" + ("" if users == "1" else "s")


def read_quantization(data: dict[str, Any], isa_flags: Sequence[str] = ()) -> Reading:
    by_label = {engine["label"]: engine for engine in data["engines"]}
    fp, q8 = by_label["float"], by_label["int8"]
    users = sorted(fp["tok_s"], key=float)
    low, high = users[0], users[-1]
    perplexity = (q8["perplexity"]["value"] / fp["perplexity"]["value"] - 1) * 100
    speed = {user: ratio(q8["tok_s"].get(user), fp["tok_s"].get(user)) for user in users}
    agreement = q8["agreement"]
    sentences = [
        f"The int8 weights read {number(q8['mb_per_step'])} MB a decode step against the float weights' "
        f"{number(fp['mb_per_step'])} MB ({data['dtype']}).",
        f"They delivered {number(q8['tok_s'][low], 1)} output tok/s for {users_text(low)} against "
        f"{number(fp['tok_s'][low], 1)} ({times(speed[low])}) and {number(q8['tok_s'][high], 1)} against "
        f"{number(fp['tok_s'][high], 1)} for {users_text(high)} ({times(speed[high])}).",
        f"Perplexity on {fp['perplexity']['num_tokens']:,} tokens of the eval text: {fp['perplexity']['value']:.3f} "
        f"float, {q8['perplexity']['value']:.3f} int8 ({perplexity:+.2f}%); {agreement['num_identical']} of "
        f"{agreement['num_prompts']} greedy answers were identical to the float weights'.",
    ]
    rows = [
        (
            engine["label"],
            engine["weights"],
            number(engine["mb_per_step"]),
            *(number(engine["tok_s"].get(user), 1) for user in users),
            number(engine["ttft_p50_ms"].get(high)),
            f"{engine['perplexity']['value']:.3f}",
            f"{(engine['perplexity']['value'] / fp['perplexity']['value'] - 1) * 100:+.2f}%",
            f"{engine['agreement']['num_identical']}/{engine['agreement']['num_prompts']}",
        )
        for engine in (fp, q8)
    ]
    headers = (
        "",
        "weights",
        "MB per step",
        *(f"tok/s, {users_text(user)}" for user in users),
        f"TTFT p50 ms, {users_text(high)}",
    )
    table = Table((*headers, "perplexity", "vs float", "greedy identical"), rows, f"output lengths {data['lengths']}")
    page = quantization_measured("avx512f" if "avx512f" in isa_flags else "avx2")
    headline = f"int8 {times(speed[low])} / {times(speed[high])} float tok/s, {perplexity:+.2f}% perplexity"
    return Reading(headline, sentences, [table], page)


def read_contract(data: dict[str, Any]) -> Reading:
    engines = [engine["name"] for engine in data["engines"]]
    totals = {engine["name"]: sum(engine["counts"].values()) for engine in data["engines"]}
    passed = {engine["name"]: engine["counts"]["pass"] for engine in data["engines"]}
    sentences = [
        "Of the same "
        + f"{max(totals.values(), default=0)} checks, "
        + ", ".join(f"{name} passed {passed[name]}" for name in engines)
        + ": every engine answers a chat, streamed or not; the differences are in the parameters and the errors."
    ]
    differences = data["differences"][:SHOWN_DIFFERENCES]
    if differences:
        sentences.append(
            "Where they part: "
            + "; ".join(
                f"{item['engine']} {item['check']} ({item['verdict']}: {item['evidence'][:90]})" for item in differences
            )
            + "."
        )
    marks = {"pass": "✔", "fail": "✘"}
    rows = [
        (check, *(marks.get(row.get(name, "—"), row.get(name, "—")) for name in engines))
        for check, row in data["matrix"].items()
    ]
    headline = ", ".join(f"{name} {passed[name]}/{totals[name]} pass" for name in engines)
    return Reading(
        headline, sentences, [Table(("check", *engines), rows, "✔ as the contract says · differs · ✘ failed · n/a")]
    )
