"""Load that lasts until a test is done with it: labs.loadtest's closed loop, cancelled at the end of a block."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from client.endpoint import Endpoint
from client.stream import RequestRecord
from labs.loadtest.runner import run_load
from labs.loadtest.workload import WorkloadSpec, parse_lengths
from tests.conftest import MODEL, Server


@asynccontextmanager
async def closed_loop(
    server: Server, users: int, prompts: Sequence[str], max_tokens: int, rounds: int
) -> AsyncIterator[list[RequestRecord]]:
    """`users` clients, each sending its next streaming request as soon as one ends, for the whole block.

    The load does not drain on its own while a slow step of the test (a doctor starting on a busy machine)
    runs: `rounds` requests per user are planned, far more than a block outlasts, and the rest are cancelled
    on leaving it (closing a stream aborts its request in vLLM). Yields the failed requests, filled as they end.
    """
    spec = WorkloadSpec(
        num_requests=users * rounds,
        rate_rps=None,
        concurrency=users,
        lengths=parse_lengths(f"fixed:{max_tokens}"),
        prompts=tuple(prompts),
    )
    failures: list[RequestRecord] = []

    def keep_failure(record: RequestRecord) -> None:
        if record.error is not None:
            failures.append(record)

    load = asyncio.create_task(
        run_load(Endpoint("vllm", server.api_url, MODEL), spec, keep_failure, scrape_interval_s=None)
    )
    try:
        yield failures
    finally:
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
