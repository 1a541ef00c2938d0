"""The teaching engine behind a minimal OpenAI-compatible API, so the kit's load tester measures it like vLLM.

    .kit/vllm/bin/python -m labs.engine.server --port 8012 --max-batch 16

Serves `POST /v1/chat/completions` (streaming with `stream_options.include_usage`, or not), `GET /v1/models`,
`GET /health` and a few vLLM-named gauges on `GET /metrics`. One thread runs the engine loop; requests
reach it through a queue and tokens come back to each HTTP handler through its own asyncio queue.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from transformers import AutoTokenizer

from labs.engine import workload
from labs.engine.config import DEFAULT_BLOCK_SIZE, DEFAULT_NUM_BLOCKS, DTYPES, POLICIES, EngineConfig
from labs.engine.engine import Engine
from labs.engine.model import SmolLM2
from labs.engine.model_runner import DTYPES as TORCH_DTYPES
from labs.engine.sequence import SamplingParams
from serve.cli import KitArgumentParser, positive_int, tcp_port
from serve.native import MODEL_DIR

SERVED_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_PORT = 8012
DEFAULT_MAX_TOKENS = 64
IDLE_POLL_S = 0.5
Sink = Callable[[int, str | None], None]  # (token id, finish reason or None)


@dataclass(slots=True)
class Submission:
    prompt_token_ids: list[int]
    params: SamplingParams
    sink: Sink


class EngineLoop:
    """Owns the engine: one thread adds submitted requests and steps while anything is unfinished."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.inbox: queue.Queue[Submission] = queue.Queue()
        self.seq_id_to_sink: dict[int, Sink] = {}
        self.registry = CollectorRegistry()
        self.running = Gauge("vllm:num_requests_running", "requests in the batch", registry=self.registry)
        self.waiting = Gauge("vllm:num_requests_waiting", "requests queued", registry=self.registry)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "fraction of KV blocks in use", registry=self.registry)
        self.preemptions = Counter("vllm:num_preemptions", "sequences preempted", registry=self.registry)
        threading.Thread(target=self._run, name="engine-loop", daemon=True).start()

    def submit(self, submission: Submission) -> None:
        self.inbox.put(submission)

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
            self._observe(self.engine.num_preemptions - preemptions_before)
            if output is None:
                continue
            for seq, token_id in zip(output.seqs, output.new_token_ids):
                sink = self.seq_id_to_sink[seq.seq_id]
                if seq.is_finished:
                    del self.seq_id_to_sink[seq.seq_id]
                sink(token_id, seq.finish_reason)

    def _observe(self, new_preemptions: int) -> None:
        scheduler, pool = self.engine.scheduler, self.engine.block_pool
        self.running.set(len(scheduler.running))
        self.waiting.set(len(scheduler.waiting))
        self.kv_usage.set(pool.num_used_blocks / pool.num_blocks)
        self.preemptions.inc(new_preemptions)


def error(status: int, message: str) -> JSONResponse:
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


class Detokenizer:
    """Turns the growing list of completion ids into text deltas; holds back a half-decoded character."""

    def __init__(self, tokenizer) -> None:  # noqa: ANN001 - any Hugging Face tokenizer
        self.tokenizer = tokenizer
        self.token_ids: list[int] = []
        self.text = ""

    def push(self, token_id: int, final: bool) -> str:
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if text.endswith("\ufffd") and not final:
            return ""
        delta, self.text = text[len(self.text):], text
        return delta


def build_app(loop: EngineLoop, tokenizer, model_name: str) -> FastAPI:  # noqa: ANN001
    app = FastAPI(title="teaching engine")
    max_model_len = loop.engine.config.max_model_len

    @app.get("/health")
    async def health() -> PlainTextResponse:
        return PlainTextResponse("")

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(loop.registry).decode())

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "teaching-engine",
                                            "max_model_len": max_model_len}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):  # noqa: ANN202 - a JSON or a streaming response
        try:
            body = await request.json()
        except ValueError as exc:
            return error(400, f"the body must be JSON with a 'messages' list of {{role, content}} ({exc})")
        if not isinstance(body, dict) or body.get("model", model_name) != model_name:
            model = body.get("model") if isinstance(body, dict) else None
            return error(404, f"The model `{model}` does not exist. This server serves `{model_name}`.")
        try:
            prompt_token_ids = workload.chat_token_ids(tokenizer, body["messages"])
        except Exception as exc:  # noqa: BLE001 - any template failure is the request's fault
            return error(400, f"'messages' must be a non-empty list of {{role, content}} ({exc})")
        room = max_model_len - len(prompt_token_ids)
        if room < 1:
            return error(400, f"the prompt has {len(prompt_token_ids)} tokens; this engine's max_model_len is "
                              f"{max_model_len}: shorten it")
        try:
            wanted = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
            params = SamplingParams(max_tokens=min(int(wanted), room), temperature=float(body.get("temperature", 1.0)),
                                    ignore_eos=bool(body.get("ignore_eos", False)))
        except (ValueError, TypeError) as exc:
            return error(400, str(exc))
        tokens: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
        event_loop = asyncio.get_running_loop()
        loop.submit(Submission(prompt_token_ids, params,
                               lambda token_id, reason: event_loop.call_soon_threadsafe(tokens.put_nowait,
                                                                                        (token_id, reason))))
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def usage(num_completion_tokens: int) -> dict[str, int]:
            return {"prompt_tokens": len(prompt_token_ids), "completion_tokens": num_completion_tokens,
                    "total_tokens": len(prompt_token_ids) + num_completion_tokens}

        detokenizer = Detokenizer(tokenizer)

        async def deltas() -> AsyncIterator[tuple[str, str | None]]:
            reason = None
            while reason is None:
                token_id, reason = await tokens.get()
                yield detokenizer.push(token_id, final=reason is not None), reason

        if not body.get("stream"):
            reason = None
            async for _, reason in deltas():
                pass
            return {"id": completion_id, "object": "chat.completion", "created": created, "model": model_name,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": detokenizer.text},
                                 "finish_reason": reason}], "usage": usage(len(detokenizer.token_ids))}

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict, reason: str | None) -> str:
            return "data: " + json.dumps({"id": completion_id, "object": "chat.completion.chunk", "created": created,
                                          "model": model_name, "choices": [{"index": 0, "delta": delta,
                                                                            "finish_reason": reason}]}) + "\n\n"

        async def events() -> AsyncIterator[str]:
            yield chunk({"role": "assistant", "content": ""}, None)
            async for text, reason in deltas():
                yield chunk({"content": text} if text else {}, reason)
            if include_usage:
                yield "data: " + json.dumps({"id": completion_id, "object": "chat.completion.chunk",
                                             "created": created, "model": model_name, "choices": [],
                                             "usage": usage(len(detokenizer.token_ids))}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def main(argv: list[str] | None = None) -> None:
    parser = KitArgumentParser(prog="python -m labs.engine.server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=tcp_port, default=DEFAULT_PORT)
    parser.add_argument("--policy", choices=POLICIES, default="continuous")
    parser.add_argument("--max-batch", type=positive_int, default=16)
    parser.add_argument("--block-size", type=positive_int, default=DEFAULT_BLOCK_SIZE)
    parser.add_argument("--num-blocks", type=positive_int, default=DEFAULT_NUM_BLOCKS)
    parser.add_argument("--prefix-caching", action="store_true")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--served-model-name", default=SERVED_MODEL_NAME)
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    try:
        config = EngineConfig(policy=args.policy, max_batch_size=args.max_batch, block_size=args.block_size,
                              num_blocks=args.num_blocks, enable_prefix_caching=args.prefix_caching, dtype=args.dtype)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    if args.threads < 1:
        parser.exit(2, f"error: --threads={args.threads} is invalid: use a whole number greater than 0\n")
    torch.set_num_threads(args.threads)
    engine = Engine(config, SmolLM2(MODEL_DIR, TORCH_DTYPES[args.dtype]))
    app = build_app(EngineLoop(engine), AutoTokenizer.from_pretrained(MODEL_DIR), args.served_model_name)
    print(f"teaching engine ({args.policy}, max batch {args.max_batch}) at http://{args.host}:{args.port}/v1",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
