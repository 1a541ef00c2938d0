"""Load that lasts until a test is done with it: labs.loadtest's closed loop, cancelled at the end of a block."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from client.endpoint import Endpoint
from client.stream import RequestRecord
from labs.loadtest.runner import run_load
from labs.loadtest.workload import WorkloadSpec, parse_lengths
from tests.conftest import MODEL, Server


@dataclass
class Load:
    """The requests a closed loop has seen end so far, filled as they end."""

    ended: list[RequestRecord] = field(default_factory=list)

    @property
    def failures(self) -> list[RequestRecord]:
        return [record for record in self.ended if record.error is not None]

    def summary(self) -> str:
        """What the clients saw, for a test's failure message: a starved client reads differently from a server."""
        failures = self.failures
        first = f", e.g. {failures[0].error}" if failures else ""
        return f"the load's clients saw {len(self.ended)} requests end, {len(failures)} of them failed{first}"


@asynccontextmanager
async def closed_loop(
    server: Server, users: int, prompts: Sequence[str], max_tokens: int, rounds: int
) -> AsyncIterator[Load]:
    """`users` clients, each sending its next streaming request as soon as one ends, for the whole block.

    The load does not drain on its own while a slow step of the test (a doctor starting on a busy machine)
    runs: `rounds` requests per user are planned, far more than a block outlasts, and the rest are cancelled
    on leaving it (closing a stream aborts its request in vLLM). Yields the requests ended so far, filled as they end.
    """
    spec = WorkloadSpec(
        num_requests=users * rounds,
        rate_rps=None,
        concurrency=users,
        lengths=parse_lengths(f"fixed:{max_tokens}"),
        prompts=tuple(prompts),
    )
    load = Load()
    sending = asyncio.create_task(
        run_load(Endpoint("vllm", server.api_url, MODEL), spec, load.ended.append, scrape_interval_s=None)
    )
    try:
        yield load
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
