"""stream_chat's SSE reading: lines split by hand from the byte stream, whatever the chunk boundaries.

A parsing test, so the bytes come from httpx's MockTransport; the real engines are in test_loadtest_server.py.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from client.stream import RequestRecord, stream_chat

EVENTS = (
    'data: {"choices":[{"delta":{"content":"héllo"}}]}\r\n\r\n'
    ': a comment line\n\n'
    'data: {"choices":[{"delta":{"content":" wörld"},"finish_reason":"length"}]}\n\n'
    'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    'data: [DONE]\n\n'
).encode()


def read(body: bytes, piece_bytes: int) -> RequestRecord:
    async def pieces():
        for start in range(0, len(body), piece_bytes):
            yield body[start : start + piece_bytes]

    async def main() -> RequestRecord:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=pieces()))
        async with httpx.AsyncClient(transport=transport) as http:
            return await stream_chat(http, "http://engine/v1", {}, RequestRecord(0, 2, time.perf_counter()))

    return asyncio.run(main())


@pytest.mark.parametrize("piece_bytes", [1, 2, 7, 64, len(EVENTS)])  # 1 and 2 split UTF-8 characters
def test_any_chunking_gives_the_same_record(piece_bytes: int) -> None:
    record = read(EVENTS, piece_bytes)
    assert record.text == "héllo wörld" and len(record.chunk_times_s) == 2
    assert (record.finish_reason, record.prompt_tokens, record.output_tokens) == ("length", 3, 2)
    assert record.ok and record.sent_s <= record.first_token_s <= record.done_s


def test_a_last_line_without_newline_is_still_read() -> None:
    record = read(EVENTS.replace(b"\n\ndata: [DONE]\n\n", b"").rstrip(b"\n"), 5)
    assert record.output_tokens == 2 and record.ok


def test_an_error_event_after_the_200_fails_the_request_with_its_message() -> None:
    # vLLM's shape when its engine core dies mid-answer: a 200, some tokens, then an error event and [DONE]
    body = (
        b'data: {"choices":[{"delta":{"content":"Once"}}]}\n\n'
        b'data: {"error":{"object":"error","message":"EngineCore encountered an issue.","code":500}}\n\n'
        b"data: [DONE]\n\n"
    )
    record = read(body, 16)
    assert record.status == 200 and record.text == "Once"
    assert record.error == "error event: EngineCore encountered an issue." and record.outcome == "failed"
