"""The bridge between the HTTP handlers (asyncio) and the engine, which only one thread may drive.

Handlers put a `Submission` in the loop's inbox; the engine thread admits everything waiting before each step,
steps while anything is unfinished, and hands each new token to its request's sink. The sink a handler gets
from `stream()` crosses back into the event loop with `call_soon_threadsafe`, so tokens arrive on an
asyncio queue in the order they were made.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from labs.engine.gauges import EngineGauges
from labs.engine.llm_engine import LLMEngine
from labs.engine.sequence import SamplingParams

IDLE_POLL_S = 0.5
Sink = Callable[[int, str | None], None]  # (token id, finish reason or None)


@dataclass(slots=True)
class Submission:
    prompt_token_ids: list[int]
    params: SamplingParams
    sink: Sink


class EngineLoop:
    """Owns the engine: one thread adds submitted requests and steps while anything is unfinished."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.inbox: queue.Queue[Submission] = queue.Queue()
        self.seq_id_to_sink: dict[int, Sink] = {}
        self.gauges = EngineGauges()
        threading.Thread(target=self._run, name="engine-loop", daemon=True).start()

    def submit(self, submission: Submission) -> None:
        self.inbox.put(submission)

    def stream(self, prompt_token_ids: list[int], params: SamplingParams) -> AsyncIterator[tuple[int, str | None]]:
        """Submits now, from the event loop; yields (token id, finish reason or None) up to the finishing one."""
        tokens: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
        event_loop = asyncio.get_running_loop()

        def sink(token_id: int, reason: str | None) -> None:
            event_loop.call_soon_threadsafe(tokens.put_nowait, (token_id, reason))

        self.submit(Submission(prompt_token_ids, params, sink))
        return _until_finished(tokens)

    def _admit(self, block: bool) -> None:
        try:
            submission = self.inbox.get(timeout=IDLE_POLL_S) if block else self.inbox.get_nowait()
            while True:
                seq = self.engine.add_request(submission.prompt_token_ids, submission.params)
                self.seq_id_to_sink[seq.seq_id] = submission.sink
                submission = self.inbox.get_nowait()
        except queue.Empty:
            return

    def _run(self) -> None:
        try:
            self._serve_forever()
        except BaseException:  # a dead engine loop must not leave clients waiting forever: crash loudly
            traceback.print_exc()
            os._exit(1)

    def _serve_forever(self) -> None:
        while True:
            self._admit(block=not self.engine.has_unfinished)
            preemptions_before = self.engine.num_preemptions
            output = self.engine.step()
            self.gauges.observe(self.engine, self.engine.num_preemptions - preemptions_before)
            if output is None:
                continue
            for seq, token_id in zip(output.seqs, output.new_token_ids, strict=True):
                sink = self.seq_id_to_sink[seq.seq_id]
                if seq.is_finished:
                    del self.seq_id_to_sink[seq.seq_id]
                sink(token_id, seq.finish_reason)


async def _until_finished(tokens: asyncio.Queue[tuple[int, str | None]]) -> AsyncIterator[tuple[int, str | None]]:
    reason = None
    while reason is None:
        token_id, reason = await tokens.get()
        yield token_id, reason
