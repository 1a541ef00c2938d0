"""Replicas behind vllm-router, three measurements side by side in one run (REPLICAS, ROUTER_POLICY):

1. Router overhead: one replica reached directly vs the same replica behind the router, at 1 and 8 users,
   runs alternating (direct, router, direct, router) so background load hits both alike. Goal: <= 5% output
   tok/s lost and <= 10 ms added TTFT p50. The router's own CPU time (its process's, from /proc) is printed
   beside: on a machine with few cores it computes on the cores the engine needs.
2. Prefix-aware vs round-robin routing, 2 replicas: groups of users share a ~650-token system prompt; TTFT p50 and
   the replicas' own prefix-cache hit rate (vllm:prefix_cache_hits_total / queries_total) per policy.
3. 1 vs 2 replicas: the same closed loop at 8 users on one replica with every core vs two replicas with one
   core each behind the router. On a 2-core machine the cores bound it, not the router.

Engines start through the kit's own runtimes (native, the settings in .env plus the overrides below) on
free ports, and are stopped at the end.

    .venv/bin/python -m benchmarks.replicas --requests 16
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

import httpx

from client.stream import RequestRecord, chat_payload, closed_loop, stream_chat
from labs.loadtest.aggregate import Summary, summarize
from labs.results import Envelope, MeasuredEngine, command_line, write
from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.engines import runtimes
from serve.engines.native import NativeRuntime
from serve.engines.router import RouterRuntime
from serve.engines.runtimes import running
from serve.processes import process
from serve.processes.metrics import MetricsSnapshot, combine, scrape
from ui.cli import KitArgumentParser, positive_int

T = TypeVar("T")
DEFAULT_OUT = ROOT / "results" / "replicas"
OVERHEAD_GOAL_TOK_S_LOSS = 0.05
OVERHEAD_GOAL_TTFT_MS = 10.0
USERS = (1, 8)
PREFIX_GROUPS = 4  # distinct long system prompts, each shared by a group of users
QUESTIONS = (
    "What is 2+2?",
    "Name a colour.",
    "Say hello.",
    "Name a fruit.",
    "Pick a number.",
    "Name a city.",
    "Say yes or no.",
    "Name an animal.",
)


def system_prompt(group: int, salt: str) -> str:
    """~650 tokens (inside MAX_MODEL_LEN 1024 with the question and answer), different from the first word
    on for every group and salt (so no two share a prefix: each policy meets prompts no replica has cached)."""
    return " ".join(f"{salt} group {group} rule {n}: answer briefly and in plain English." for n in range(1, 36))


async def send_all(
    api_url: str, model: str, api_key: str | None, users: int, messages: list[list[dict]], max_tokens: int
) -> list[RequestRecord]:
    """`users` users in a closed loop, each sending the next of `messages` when its last answer ended, until none
    are left."""
    queue = list(enumerate(messages))
    records: list[RequestRecord] = []

    async def turn(http: httpx.AsyncClient, _user: int) -> bool:
        if not queue:
            return False
        request_id, conversation = queue.pop(0)
        record = RequestRecord(request_id, max_tokens, time.perf_counter())
        payload = chat_payload(model, conversation, max_tokens, ignore_eos=True)
        records.append(await stream_chat(http, api_url, payload, record, api_key))
        return True

    await closed_loop(users, turn)
    return records


def plain_messages(count: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Write a short story about the number {n}."}] for n in range(count)]


def prefix_messages(count: int, salt: str, seed: int = 0) -> list[list[dict]]:
    """Requests from PREFIX_GROUPS groups, interleaved at random: each repeats its group's system prompt."""
    rng = random.Random(seed)
    return [
        [
            {"role": "system", "content": system_prompt(rng.randrange(PREFIX_GROUPS), salt)},
            {"role": "user", "content": QUESTIONS[n % len(QUESTIONS)]},
        ]
        for n in range(count)
    ]


def measure(settings: Settings, base_url: str, users: int, messages: list[list[dict]], max_tokens: int) -> Summary:
    records = asyncio.run(
        send_all(f"{base_url}/v1", settings.model_name, settings.api_key or None, users, messages, max_tokens)
    )
    error = first_error(records)
    if error is not None:
        print(f"(a request failed at {base_url}: {error})")
    return summarize(records)


def row(label: str, summary: Summary) -> str:
    return (
        f"| {label} | {summary.num_ok}/{summary.num_requests} | {summary.output_tokens_per_s:.1f} | "
        f"{summary.ttft_ms.median:.0f} |"
    )


def first_error(records: list[RequestRecord]) -> str | None:
    return next((f"{record.status}: {record.error or record.text}"[:300] for record in records if not record.ok), None)


def output_rate(summary: Summary) -> float:
    return summary.output_tokens_per_s


@overload
def typical(found: list[Summary]) -> Summary: ...
@overload
def typical(found: list[T], key: Callable[[T], float]) -> T: ...
def typical(found: list[Any], key: Callable[[Any], float] = output_rate) -> Any:
    """The round with the median `key` (output tok/s unless told; the lower middle one of an even count): one
    slow round, a burst of someone else's load, moves it less than a mean or a best-of."""
    ranked = sorted(found, key=key)
    return ranked[(len(ranked) - 1) // 2]


def overhead_and_one_replica(
    settings: Settings, requests: int, max_tokens: int, rounds: int, found: dict[str, Any]
) -> dict[int, Summary]:
    """Measurements 1 and the first half of 3, recorded in `found`. Returns the direct runs per user count."""
    port = process.free_port_run("127.0.0.1", 3)
    one = dataclasses.replace(settings, port=port, replicas=1)
    engine = NativeRuntime(one, port=port + 1)
    router = RouterRuntime(one, [engine.base_url], port + 2)
    direct: dict[int, Summary] = {}
    with running([engine, router]):
        measure(one, engine.base_url, 1, plain_messages(2), 8)  # warm-up
        print(
            f"\n## 1. Router overhead: one replica (every core), direct vs behind vllm-router, {rounds} rounds "
            "each, alternating; the median round\n"
        )
        print(
            "| users | path | ok | output tok/s | TTFT p50 ms | rounds' tok/s | router CPU |\n"
            "|---|---|---|---|---|---|---|"
        )
        router_pid = router.running_pid()
        assert router_pid is not None, "the router is not running"
        found["router_argv"] = router.command()[0][3:]  # its flags: the failover settings measured with
        for users in USERS:
            runs: dict[str, list[Summary]] = {"direct": [], "router": []}
            router_cpu_s = 0.0
            for _ in range(rounds):  # alternate so background load hits both alike
                for path, url in (("direct", engine.base_url), ("router", router.base_url)):
                    before = process.group_cpu_seconds(router_pid)  # the router and its supervisor
                    runs[path].append(measure(one, url, users, plain_messages(requests), max_tokens))
                    if path == "router":
                        router_cpu_s += process.group_cpu_seconds(router_pid) - before
            middle = {path: typical(found) for path, found in runs.items()}
            routed_s = sum(summary.duration_s for summary in runs["router"])
            routed = sum(summary.num_requests for summary in runs["router"])
            cpu = {
                "direct": "",
                "router": f"{1000 * router_cpu_s / routed:.1f} ms a request, {router_cpu_s / routed_s:.1%} of a core",
            }
            for path in ("direct", "router"):
                spread = ", ".join(f"{s.output_tokens_per_s:.1f}" for s in runs[path])
                print(f"{row(f'{users} | {path}', middle[path])} {spread} | {cpu[path]} |")
            loss = 1 - middle["router"].output_tokens_per_s / middle["direct"].output_tokens_per_s
            added_ms = middle["router"].ttft_ms.median - middle["direct"].ttft_ms.median
            tok_s_verdict = "meets" if loss <= OVERHEAD_GOAL_TOK_S_LOSS else "misses"
            ttft_verdict = "meets" if added_ms <= OVERHEAD_GOAL_TTFT_MS else "misses"
            print(
                f"| {users} | router/direct | | {1 - loss:.3f} ({loss:.1%} lost: {tok_s_verdict} the goal of "
                f"{OVERHEAD_GOAL_TOK_S_LOSS:.0%}) | {added_ms:+.0f} ms ({ttft_verdict} the goal of "
                f"{OVERHEAD_GOAL_TTFT_MS:g} ms) | | |"
            )
            direct[users] = middle["direct"]
            found.setdefault("router_overhead", {})[str(users)] = {
                "direct_tokens_per_s": middle["direct"].output_tokens_per_s,
                "router_tokens_per_s": middle["router"].output_tokens_per_s,
                "lost": loss,
                "ttft_p50_direct_ms": middle["direct"].ttft_ms.median,
                "ttft_p50_router_ms": middle["router"].ttft_ms.median,
                "ttft_p50_added_ms": added_ms,
                "meets_tok_s_goal": loss <= OVERHEAD_GOAL_TOK_S_LOSS,
                "meets_ttft_goal": added_ms <= OVERHEAD_GOAL_TTFT_MS,
                "rounds_tokens_per_s": {path: [r.output_tokens_per_s for r in runs[path]] for path in runs},
                "rounds_ok": {path: [r.num_ok for r in runs[path]] for path in runs},
                "router_cpu_ms_per_request": 1000 * router_cpu_s / routed,
            }
    return direct


def prefix_rate(before: MetricsSnapshot, after: MetricsSnapshot) -> float:
    """The replicas' prefix-cache hit rate between two snapshots of them all."""
    queries = (after.prefix_queries_total or 0) - (before.prefix_queries_total or 0)
    return ((after.prefix_hits_total or 0) - (before.prefix_hits_total or 0)) / queries if queries else 0.0


def two_replicas(settings: Settings, requests: int, max_tokens: int, rounds: int, direct: dict[int, Summary]) -> None:
    """Measurements 2 and the second half of 3."""
    port = process.free_port_run("127.0.0.1", 3)
    two = dataclasses.replace(settings, port=port, replicas=2)
    engines = runtimes.vllm_runtimes(two)[:-1]
    urls = [runtime.base_url for runtime in engines]
    with running(engines):
        # the router's ports are picked once the replicas are up: minutes of starts leave time for another
        # program on this machine to take a port picked before them
        router_port = process.free_port_run("127.0.0.1", 2)
        two = dataclasses.replace(two, port=router_port)
        print("\n## 3. One replica with every core vs two with one core each (round_robin), 8 users\n")
        with running([RouterRuntime(dataclasses.replace(two, router_policy="round_robin"), urls, router_port + 1)]):
            measure(two, two.base_url, 2, plain_messages(2), 8)  # warm-up, one per replica
            print("| setup | ok | output tok/s | TTFT p50 ms |\n|---|---|---|---|")
            print(row("1 replica, direct", direct[8]))
            spread = measure(two, two.base_url, 8, plain_messages(requests), max_tokens)
            print(row("2 replicas, router", spread))
            print(f"| 2 / 1 | | {spread.output_tokens_per_s / direct[8].output_tokens_per_s:.2f}x | |")
        print(
            "\n## 2. Prefix-aware vs round-robin, 2 replicas, "
            f"{PREFIX_GROUPS} groups sharing ~650-token system prompts, 8 users, {rounds} rounds each, "
            "alternating, new prompts every round; the median round\n"
        )
        runs: dict[str, list[tuple[Summary, float, list[float]]]] = {"round_robin": [], "cache_aware": []}
        for number in range(rounds):
            for policy in runs:
                with running([RouterRuntime(dataclasses.replace(two, router_policy=policy), urls, router_port + 1)]):
                    before = [scrape(url) for url in urls]
                    summary = measure(
                        two, two.base_url, 8, prefix_messages(requests, f"{policy}{number}", number), max_tokens
                    )
                    after = [scrape(url) for url in urls]
                    served = [
                        new.requests_done_total - old.requests_done_total
                        for new, old in zip(after, before, strict=True)
                    ]
                    runs[policy].append((summary, prefix_rate(combine(before), combine(after)), served))
        print(
            "| policy | ok | output tok/s | TTFT p50 ms | prefix-cache hit rate | requests per replica | "
            "rounds' TTFT p50 ms |\n|---|---|---|---|---|---|---|"
        )
        for policy, found in runs.items():
            summary, rate, served = typical(found, key=lambda run: run[0].ttft_ms.median)
            ttfts = ", ".join(f"{run[0].ttft_ms.median:.0f}" for run in found)
            print(f"{row(policy, summary)} {rate:.1%} | {' / '.join(f'{n:.0f}' for n in served)} | {ttfts} |")


def main() -> None:
    parser = KitArgumentParser(prog="python -m benchmarks.replicas", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=positive_int, default=16, help="requests per measured run")
    parser.add_argument("--max-tokens", type=positive_int, default=32, help="output tokens per request")
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        help="rounds of each side of a comparison, alternating; the median round is reported",
    )
    parser.add_argument(
        "--overhead-only", action="store_true", help="measure only the router's overhead (1), not 2 and 3"
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"folder for results.json (default: {DEFAULT_OUT})"
    )
    args = parser.parse_args()
    settings = dataclasses.replace(Settings.load(), runtime="native")
    print(
        f"benchmarks.replicas: {args.requests} requests per run, {args.max_tokens} output tokens each "
        f"(ignore_eos), model {settings.model_name}"
    )
    found: dict[str, Any] = {
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "goals": {"tok_s_lost": OVERHEAD_GOAL_TOK_S_LOSS, "ttft_p50_added_ms": OVERHEAD_GOAL_TTFT_MS},
    }
    direct = overhead_and_one_replica(settings, args.requests, args.max_tokens, args.rounds, found)
    if not args.overhead_only:
        two_replicas(settings, args.requests, args.max_tokens, args.rounds, direct)
    command = command_line("python -m benchmarks.replicas", sys.argv[1:])
    engines = [MeasuredEngine(settings.model_name, "http://127.0.0.1 (free ports)", "vllm")]
    write(args.out / "results.json", Envelope.now(command, engines), found)
    print(f"Wrote {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
