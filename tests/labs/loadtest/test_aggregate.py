"""The load tester's pure parts: aggregation against hand-computed records, and the seeded workload."""

from __future__ import annotations

import math
import statistics
from itertools import pairwise

import pytest

from client.stream import RequestRecord
from labs.loadtest.aggregate import DEFINITIONS, Peaks, Summary, e2e_ms, queue_ms, summarize, ttft_ms
from labs.loadtest.workload import LengthBand, WorkloadSpec, parse_lengths, schedule
from serve.processes.metrics import MetricsSnapshot


def record(
    request_id: int,
    scheduled_s: float,
    sent_s: float,
    chunks_s: list[float],
    done_s: float,
    *,
    status: int = 200,
    finish: str | None = "length",
    output_tokens: int | None = None,
    max_tokens: int = 4,
    prompt_tokens: int = 10,
    error: str | None = None,
) -> RequestRecord:
    return RequestRecord(
        request_id,
        max_tokens,
        scheduled_s,
        sent_s=sent_s,
        first_token_s=chunks_s[0] if chunks_s else None,
        chunk_times_s=chunks_s,
        done_s=done_s,
        status=status,
        finish_reason=finish,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        text="x" * len(chunks_s),
        error=error,
    )


@pytest.fixture
def four_requests() -> list[RequestRecord]:
    return [
        # ok, waited 100 ms on the client: TTFT 200, E2E 600, TPOT (0.7-0.3)/3 = 133.33, ITL 100 and 200
        record(0, 0.0, 0.1, [0.3, 0.4, 0.6], 0.7, output_tokens=4, max_tokens=4, prompt_tokens=10),
        # ok, stopped at EOS: TTFT 100, E2E 500, TPOT (1.0-0.6)/1 = 400, ITL 300
        record(1, 0.5, 0.5, [0.6, 0.9], 1.0, finish="stop", output_tokens=2, max_tokens=8, prompt_tokens=12),
        # truncated: HTTP 200 but no finish reason (llama.cpp's interrupted stream); 1 token delivered
        record(2, 1.0, 1.0, [1.1], 1.2, finish=None, output_tokens=1, prompt_tokens=5),
        # failed: the engine refused it
        record(3, 1.5, 1.5, [], 2.0, status=503, finish=None, error="overloaded", prompt_tokens=0),
    ]


def test_counts_throughput_and_duration(four_requests: list[RequestRecord]) -> None:
    summary = summarize(four_requests)
    assert (summary.num_requests, summary.num_ok, summary.num_truncated, summary.num_failed) == (4, 2, 1, 1)
    assert summary.duration_s == pytest.approx(2.0)  # first arrival 0.0 to the last end 2.0
    assert summary.total_output_tokens == 7  # 4 + 2 delivered by the ok ones + 1 by the truncated one
    assert summary.total_prompt_tokens == 27
    assert summary.request_throughput_per_s == pytest.approx(1.0)  # 2 ok / 2 s
    assert summary.output_tokens_per_s == pytest.approx(3.5)  # 7 / 2 s


def test_latency_distributions_by_hand(four_requests: list[RequestRecord]) -> None:
    summary = summarize(four_requests)
    assert summary.ttft_ms.count == 2
    assert summary.ttft_ms.mean == pytest.approx(150.0)
    assert summary.ttft_ms.median == pytest.approx(150.0)
    assert summary.ttft_ms.p90 == pytest.approx(190.0)  # linear: 100 + 0.9 x (200 - 100)
    assert summary.ttft_ms.p99 == pytest.approx(199.0)
    assert summary.e2e_ms.median == pytest.approx(550.0)
    assert summary.e2e_ms.p95 == pytest.approx(595.0)
    assert summary.tpot_ms.mean == pytest.approx((400.0 / 3 + 400.0) / 2)
    assert summary.itl_ms.count == 3 and summary.itl_ms.median == pytest.approx(200.0)
    assert summary.itl_ms.p90 == pytest.approx(280.0)  # 200 + 0.8 x (300 - 200)
    assert summary.queue_ms.count == 4 and summary.queue_ms.mean == pytest.approx(25.0)
    assert summary.queue_ms.median == pytest.approx(0.0) and summary.queue_ms.p99 == pytest.approx(97.0)


def test_tokens_fall_back_to_chunks_and_single_token_answers_have_no_tpot() -> None:
    no_usage = record(0, 0.0, 0.0, [0.1, 0.2, 0.3], 0.4, output_tokens=None, max_tokens=3)
    one_token = record(1, 0.0, 0.0, [0.2], 0.25, output_tokens=1, max_tokens=1)
    summary = summarize([no_usage, one_token])
    assert summary.total_output_tokens == 4  # 3 chunks counted as tokens + 1 from usage
    assert summary.tpot_ms.count == 1 and summary.tpot_ms.mean == pytest.approx(150.0)  # (0.4-0.1)/2


def test_a_length_stop_short_of_max_tokens_is_truncated() -> None:
    short = record(0, 0.0, 0.0, [0.1, 0.2], 0.3, output_tokens=2, max_tokens=24)
    summary = summarize([short])
    assert (summary.num_ok, summary.num_truncated) == (0, 1)
    assert math.isnan(summary.ttft_ms.median) and summary.request_throughput_per_s == 0.0


def test_nothing_answered_gives_empty_metrics_not_errors() -> None:
    summary = summarize([])
    assert isinstance(summary, Summary) and summary.duration_s == 0.0 and summary.output_tokens_per_s == 0.0
    assert summary.ttft_ms.count == 0 and math.isnan(summary.ttft_ms.p99)


def test_vllm_bench_names_carry_the_same_numbers_in_vllms_units(four_requests: list[RequestRecord]) -> None:
    summary = summarize(four_requests)
    fields = summary.vllm_bench_fields()
    assert (fields["completed"], fields["failed"], fields["duration"]) == (2, 2, pytest.approx(2.0))
    assert (fields["total_input_tokens"], fields["total_output_tokens"]) == (27, 7)
    assert fields["request_throughput"] == pytest.approx(1.0) and fields["output_throughput"] == pytest.approx(3.5)
    assert fields["total_token_throughput"] == pytest.approx((27 + 7) / 2.0)
    assert fields["median_ttft_ms"] == pytest.approx(150.0) and fields["p99_ttft_ms"] == pytest.approx(199.0)
    assert fields["std_ttft_ms"] == pytest.approx(50.0)  # population deviation of 100 and 200, as numpy's
    assert fields["median_tpot_ms"] == summary.tpot_ms.median and fields["median_itl_ms"] == pytest.approx(200.0)
    assert fields["mean_e2el_ms"] == pytest.approx(550.0) and fields["p95_e2el_ms"] == pytest.approx(595.0)


def test_per_request_milliseconds_come_from_one_place(four_requests: list[RequestRecord]) -> None:
    first, *_, failed = four_requests
    assert (queue_ms(first), ttft_ms(first), e2e_ms(first)) == pytest.approx((100.0, 200.0, 600.0))
    assert ttft_ms(failed) is None and e2e_ms(failed) == pytest.approx(500.0)
    never_sent = RequestRecord(9, 4, 1.0)
    assert (queue_ms(never_sent), ttft_ms(never_sent), e2e_ms(never_sent)) == (None, None, None)


def test_metrics_peaks_over_a_series() -> None:
    series = [
        MetricsSnapshot(0.0, 1, 0, 0.10, 3),
        MetricsSnapshot(0.5, 4, 2, None, 3),
        MetricsSnapshot(1.0, 2, 5, 0.42, 7),
    ]
    peaks = Peaks.of(series)
    assert peaks == Peaks(3, 4, 5, 0.42, 4) and Peaks.of([]) is None
    assert peaks.to_dict() == {"max_running": 4, "max_waiting": 5, "max_kv_usage": 0.42, "preemptions": 4}
    assert peaks.describe() == "running≤4 waiting≤5 KV≤42% preempted 4"
    assert math.isnan(Peaks.of(series[1:2]).max_kv_usage)


def test_every_reported_metric_is_defined_once() -> None:
    for name in (
        "ttft_ms",
        "tpot_ms",
        "itl_ms",
        "e2e_ms",
        "queue_ms",
        "request_throughput_per_s",
        "output_tokens_per_s",
        "duration_s",
    ):
        assert name in Summary.__dataclass_fields__ and DEFINITIONS[name]
    assert "first" in DEFINITIONS["tpot_ms"] and "chunk" in DEFINITIONS["itl_ms"]


def test_the_same_seed_gives_the_same_plan_and_another_seed_does_not() -> None:
    first, again, other = schedule(WorkloadSpec(seed=7)), schedule(WorkloadSpec(seed=7)), schedule(WorkloadSpec(seed=8))
    assert first == again
    assert [p.offset_s for p in first] != [p.offset_s for p in other]


def test_default_scenario_is_the_seed_study() -> None:
    scheduled = schedule(WorkloadSpec())
    assert len(scheduled) == 48 and scheduled[0].offset_s == 0.0
    assert {p.max_tokens for p in scheduled} == {24, 150}
    many = schedule(WorkloadSpec(num_requests=20_000))
    assert sum(p.max_tokens == 150 for p in many) / len(many) == pytest.approx(0.2, abs=0.01)


def gaps(spec: WorkloadSpec) -> list[float]:
    offsets = [p.offset_s for p in schedule(spec)]
    return [later - earlier for earlier, later in pairwise(offsets)]


def test_arrival_gaps_have_the_mean_rate_and_the_shape_asked_for() -> None:
    n, rate = 20_000, 25.0
    poisson = gaps(WorkloadSpec(num_requests=n, rate_rps=rate))
    assert statistics.fmean(poisson) == pytest.approx(1 / rate, rel=0.03)
    assert statistics.stdev(poisson) / statistics.fmean(poisson) == pytest.approx(1.0, abs=0.05)  # exponential
    bursty = gaps(WorkloadSpec(num_requests=n, rate_rps=rate, arrival="bursty"))
    assert statistics.fmean(bursty) == pytest.approx(1 / rate, rel=0.05)
    assert statistics.stdev(bursty) / statistics.fmean(bursty) == pytest.approx(2.0, abs=0.15)  # 1/sqrt(0.25)
    regular = gaps(WorkloadSpec(num_requests=10, rate_rps=rate, arrival="regular"))
    assert regular == pytest.approx([1 / rate] * 9)
    closed = schedule(WorkloadSpec(num_requests=5, rate_rps=None, concurrency=2))
    assert [p.offset_s for p in closed] == [0.0] * 5


def test_length_specs() -> None:
    assert parse_lengths("fixed:64") == (LengthBand(64, 64, 1.0),)
    assert parse_lengths("uniform:16-128") == (LengthBand(16, 128, 1.0),)
    assert parse_lengths("mix:24@0.8,100-200@0.2") == (LengthBand(24, 24, 0.8), LengthBand(100, 200, 0.2))
    lengths = {p.max_tokens for p in schedule(WorkloadSpec(num_requests=500, lengths=parse_lengths("uniform:5-9")))}
    assert lengths == {5, 6, 7, 8, 9}


@pytest.mark.parametrize(
    ("spec", "fix"),
    [
        ("fixed:", "use fixed:64"),
        ("uniform:9", "use fixed:64"),
        ("mix:24", "use fixed:64"),
        ("zipf:3", "use fixed:64"),
    ],
)
def test_bad_length_specs_say_how_to_write_them(spec: str, fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        parse_lengths(spec)


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"num_requests": 0}, "at least 1 request"),
        ({"rate_rps": -1.0}, "requests per second > 0"),
        ({"rate_rps": None}, "set --rate .* or --concurrency"),
        ({"concurrency": 0}, "at least 1 user"),
        ({"arrival": "zipf"}, "choose one of poisson, bursty, regular"),
        ({"arrival": "poisson", "burstiness": 0.5}, "use --arrival bursty"),
        ({"arrival": "bursty", "burstiness": 0.0}, "gamma shape > 0"),
        ({"lengths": (LengthBand(0, 4, 1.0),)}, "0 < min <= max"),
    ],
)
def test_bad_workloads_say_how_to_fix_them(kwargs: dict, fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        WorkloadSpec(**kwargs)
