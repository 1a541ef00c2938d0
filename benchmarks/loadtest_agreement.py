"""Agreement: the same workload on the same real vLLM, through our load tester and through vLLM's own
serving benchmark (`vllm.benchmarks.serve`, driven from Python in the vLLM venv: its console script is
broken here). Prints TTFT median and output throughput of both, and our/theirs ratios. Goal: within 10%.

Same prompts (the lab's set, written as a ShareGPT-style dataset), same count, same Poisson rate, same fixed
output length with ignore_eos, one warm-up request each. The two tools draw different Poisson samples of
the same process, so run a few rounds (--rounds) and read the medians; rounds alternate the order.

    .venv/bin/python -m benchmarks.loadtest_agreement [--base-url http://127.0.0.1:8009/v1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from client.endpoint import Endpoint, EndpointError
from labs.loadtest.aggregate import summarize
from labs.loadtest.runner import run_load
from labs.loadtest.workload import DEFAULT_PROMPTS, WorkloadSpec, parse_lengths
from serve.config.model import MODEL_DIR
from serve.install.vllm_venv import VENV as VLLM_VENV
from ui.cli import KitArgumentParser, non_negative_int, positive_float, positive_int

GOAL_RATIO_TOLERANCE = 0.10
BENCH_TIMEOUT_S = 900
# vllm.benchmarks.serve through its Python entry points (REFERENCE.md), argv from the command line
VLLM_BENCH_DRIVER = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def parse_args() -> argparse.Namespace:
    parser = KitArgumentParser(
        prog="python -m benchmarks.loadtest_agreement",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base-url", help="OpenAI /v1 URL (default: OPENAI_BASE_URL from the environment/.env)")
    parser.add_argument("--model", help="model name (default: MODEL from the environment/.env)")
    parser.add_argument("--requests", type=positive_int, default=32)
    parser.add_argument("--rate", type=positive_float, default=2.0, help="Poisson arrivals per second")
    parser.add_argument("--output-len", type=positive_int, default=32)
    parser.add_argument("--rounds", type=positive_int, default=2)
    parser.add_argument("--seed", type=non_negative_int, default=0)
    return parser.parse_args()


def run_vllm_bench(args: argparse.Namespace, endpoint: Endpoint, work_dir: Path, round_index: int) -> dict[str, float]:
    # the ShareGPT layout: the bench's loader for it needs only json (its custom JSONL loader needs pandas,
    # which the vLLM venv lacks); --sharegpt-output-len overrides the placeholder answers' lengths
    dataset = work_dir / "prompts.json"
    dataset.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": "placeholder answer"}]}
                for prompt in DEFAULT_PROMPTS
            ]
        )
    )
    result_name = f"vllm-bench-{round_index}.json"
    argv = [
        "--backend",
        "openai-chat",
        "--base-url",
        endpoint.root_url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        endpoint.model,
        "--tokenizer",
        str(MODEL_DIR),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--sharegpt-output-len",
        str(args.output_len),
        "--ignore-eos",
        "--num-prompts",
        str(args.requests),
        "--request-rate",
        str(args.rate),
        "--seed",
        str(args.seed + round_index),
        "--num-warmups",
        "1",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(work_dir),
        "--result-filename",
        result_name,
    ]
    completed = subprocess.run(
        [str(VLLM_VENV.python), "-c", VLLM_BENCH_DRIVER, *argv],
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
        cwd=work_dir,
    )
    if completed.returncode != 0:
        sys.exit(f"error: vllm.benchmarks.serve failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    result = json.loads((work_dir / result_name).read_text())
    return {
        "ttft_median_ms": result["median_ttft_ms"],
        "output_tokens_per_s": result["output_throughput"],
        "completed": result["completed"],
        "tpot_median_ms": result["median_tpot_ms"],
    }


def run_ours(args: argparse.Namespace, endpoint: Endpoint, round_index: int) -> dict[str, float]:
    lengths = parse_lengths(f"fixed:{args.output_len}")
    warm_up = WorkloadSpec(num_requests=1, rate_rps=None, concurrency=1, lengths=lengths)
    asyncio.run(run_load(endpoint, warm_up, scrape_interval_s=None))
    spec = WorkloadSpec(num_requests=args.requests, rate_rps=args.rate, lengths=lengths, seed=args.seed + round_index)
    summary = summarize(asyncio.run(run_load(endpoint, spec, scrape_interval_s=None)).records)
    return {
        "ttft_median_ms": summary.ttft_ms.median,
        "output_tokens_per_s": summary.output_tokens_per_s,
        "completed": summary.num_ok,
        "tpot_median_ms": summary.tpot_ms.median,
    }


def main() -> int:
    args = parse_args()
    endpoint = Endpoint.from_env(
        base_url=args.base_url,
        model=args.model,
        url_source="--base-url/OPENAI_BASE_URL",
        model_source="--model" if args.model else "MODEL",
    )
    try:
        endpoint.check()
    except EndpointError as exc:
        sys.exit(f"error: {exc}")
    print(
        f"agreement: {args.requests} requests at {args.rate:g} req/s Poisson, {args.output_len} output tokens "
        f"(ignore_eos), {args.rounds} round(s), against {endpoint.base_url} ({endpoint.model})",
        flush=True,
    )
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as work:
        for round_index in range(args.rounds):
            order = ("ours", "vllm") if round_index % 2 == 0 else ("vllm", "ours")
            for tool in order:
                if tool == "ours":
                    ours.append(run_ours(args, endpoint, round_index))
                else:
                    theirs.append(run_vllm_bench(args, endpoint, Path(work), round_index))
                row = (ours if tool == "ours" else theirs)[-1]
                print(
                    f"  round {round_index + 1} {tool:<5} completed {row['completed']:>3}  TTFT median "
                    f"{row['ttft_median_ms']:8.1f} ms  TPOT median {row['tpot_median_ms']:6.1f} ms  "
                    f"output {row['output_tokens_per_s']:7.1f} tok/s",
                    flush=True,
                )
    verdicts = []
    for metric in ("ttft_median_ms", "output_tokens_per_s"):
        mine = statistics.median(row[metric] for row in ours)
        reference = statistics.median(row[metric] for row in theirs)
        ratio = mine / reference
        within = abs(ratio - 1) <= GOAL_RATIO_TOLERANCE
        verdicts.append(within)
        print(
            f"{metric:<20} ours {mine:8.1f}  vllm bench {reference:8.1f}  ratio {ratio:.3f}  "
            f"{'within' if within else 'OUTSIDE'} ±{GOAL_RATIO_TOLERANCE:.0%}"
        )
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
