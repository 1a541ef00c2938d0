"""A minimal OpenAI-style streaming server on a real local socket: the load generator's sparring partner.

It is a fake engine, named as such: it answers every POST .../chat/completions with `max_tokens`
SSE chunks as fast as asyncio can write them (optionally `--token-delay-ms` apart), a finish chunk with
usage, and [DONE]. HTTP/1.1 keep-alive with chunked transfer encoding; GET /v1/models lists `fake-stream`;
no /metrics (404). With --cut-short-after N it plays a fault no engine of the kit produces on demand: every answer
ends after N tokens with [DONE] and no finish reason, HTTP 200 all the same (as llama-cpp-python's server does to a
running stream when another request arrives), which a benchmark must count as truncated, not as fast.

    python -m benchmarks.stream_server --port 18123 [--cpu 1] [--token-delay-ms 0] [--cut-short-after N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os

from ui.cli import KitArgumentParser, non_negative_float, non_negative_int, positive_int, tcp_port

CHUNK = 'data: {"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'
HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)
MODEL = "fake-stream"
MODELS = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
MODELS_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    b"Connection: keep-alive\r\n\r\n%s" % (len(MODELS), MODELS)
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: keep-alive\r\n\r\nnot found"


def http_chunk(text: str) -> bytes:
    data = text.encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


def final_events(num_tokens: int) -> str:
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": num_tokens}}
    return f"data: {json.dumps(finish)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n"


async def answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token_delay_s: float, cut_short_after: int | None
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            length = next(
                (int(line.split(":", 1)[1]) for line in header_lines if line.lower().startswith("content-length:")), 0
            )
            body = await reader.readexactly(length) if length else b""
            if request_line.startswith("GET") and "/v1/models" in request_line:
                writer.write(MODELS_RESPONSE)
                await writer.drain()
                continue
            if not request_line.startswith("POST") or "/chat/completions" not in request_line:
                writer.write(NOT_FOUND)
                await writer.drain()
                continue
            num_tokens = int(json.loads(body).get("max_tokens") or 1)
            sent = num_tokens if cut_short_after is None else min(num_tokens, cut_short_after)
            writer.write(HEADERS)
            for _ in range(sent):
                writer.write(http_chunk(CHUNK))
                if token_delay_s:
                    await writer.drain()
                    await asyncio.sleep(token_delay_s)
            ending = final_events(num_tokens) if cut_short_after is None else "data: [DONE]\n\n"
            writer.write(http_chunk(ending) + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(host: str, port: int, token_delay_s: float, cut_short_after: int | None = None) -> None:
    server = await asyncio.start_server(
        lambda r, w: answer(r, w, token_delay_s, cut_short_after), host, port, backlog=1024
    )
    print(f"stream server listening on http://{host}:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = KitArgumentParser(
        prog="python -m benchmarks.stream_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=tcp_port, required=True)
    parser.add_argument("--cpu", type=non_negative_int, default=None, help="pin this server to one CPU core")
    parser.add_argument("--token-delay-ms", type=non_negative_float, default=0.0)
    parser.add_argument(
        "--cut-short-after", type=positive_int, default=None, help="end every answer after N tokens, no finish reason"
    )
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.token_delay_ms / 1000.0, args.cut_short_after))


if __name__ == "__main__":
    main()
