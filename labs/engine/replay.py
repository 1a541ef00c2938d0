"""Replaying a workload through the engine on a clock that skips idle time.

The clock is real (`perf_counter`) while the engine computes, so every latency is measured, not
simulated; when the engine has nothing to do it jumps to the next arrival instead of sleeping.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from labs.engine.llm_engine import LLMEngine
from labs.engine.sequence import SamplingParams, Sequence
from labs.engine.workload import Request


class SkipIdleClock:
    def __init__(self) -> None:
        self._start_s = time.perf_counter()
        self._skipped_s = 0.0

    def __call__(self) -> float:
        return time.perf_counter() - self._start_s + self._skipped_s

    def skip_to(self, moment_s: float) -> None:
        self._skipped_s += max(0.0, moment_s - self())


def replay(
    engine: LLMEngine,
    clock: SkipIdleClock,
    requests: list[Request],
    on_finished: Callable[[Sequence], None] = lambda seq: None,
) -> list[Sequence]:
    """Add each request when the clock reaches its arrival; step until all finish. Sequences in request order."""
    pending = deque(sorted(requests, key=lambda request: request.arrival_s))
    origin_s = clock()
    seqs: list[Sequence] = []
    while pending or engine.has_unfinished:
        while pending and origin_s + pending[0].arrival_s <= clock():
            request = pending.popleft()
            params = SamplingParams(max_tokens=request.max_tokens, ignore_eos=True)
            seqs.append(engine.add_request(request.prompt_token_ids, params, origin_s + request.arrival_s))
        if not engine.has_unfinished:
            clock.skip_to(origin_s + pending[0].arrival_s)
            continue
        output = engine.step()
        for seq in output.finished if output else []:
            on_finished(seq)
    return sorted(seqs, key=lambda seq: seq.seq_id)
