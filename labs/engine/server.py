"""The teaching engine behind a minimal OpenAI-compatible API, so the kit's load tester measures it like vLLM.

    .kit/vllm/bin/python -m labs.engine.server --port 8012 --max-batch 16

Serves `POST /v1/chat/completions` (streaming with `stream_options.include_usage`, or not), `GET /v1/models`,
`GET /health` and a few vLLM-named gauges on `GET /metrics`. One thread runs the engine loop; requests
reach it through a queue and tokens come back to each HTTP handler through its own asyncio queue.
This module wires the pieces and parses the command line: engine_loop (the thread), gauges, openai_shapes
(what is sent and answered), detokenizer (token ids to text deltas).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from transformers import AutoTokenizer

from labs.engine.config import THREADS, EngineConfig, add_flags
from labs.engine.detokenizer import Detokenizer
from labs.engine.engine import Engine
from labs.engine.engine_loop import EngineLoop
from labs.engine.model import SmolLM2
from labs.engine.model_runner import DTYPES as TORCH_DTYPES
from labs.engine.openai_shapes import DONE_EVENT, Completion, RequestError, model_list, parse_chat
from serve.cli import KitArgumentParser, tcp_port
from serve.model import BUNDLED_MODEL_NAME, MODEL_DIR

SERVED_MODEL_NAME = BUNDLED_MODEL_NAME
DEFAULT_PORT = 8012
ENGINE_FLAGS = ("policy", "max_batch_size", "block_size", "num_blocks", "enable_prefix_caching", "dtype")


def build_app(loop: EngineLoop, tokenizer, model_name: str) -> FastAPI:  # noqa: ANN001
    app = FastAPI(title="teaching engine")
    max_model_len = loop.engine.config.max_model_len

    @app.get("/health")
    async def health() -> PlainTextResponse:
        return PlainTextResponse("")

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(loop.gauges.exposition())

    @app.get("/v1/models")
    async def models() -> dict:
        return model_list(model_name, max_model_len)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):  # noqa: ANN202 - a JSON or a streaming response
        try:
            chat_request = parse_chat(await request.body(), tokenizer, model_name, max_model_len)
        except RequestError as refused:
            return JSONResponse(refused.body(), status_code=refused.status)
        tokens = loop.stream(chat_request.prompt_token_ids, chat_request.params)
        completion = Completion(model_name, len(chat_request.prompt_token_ids))
        detokenizer = Detokenizer(tokenizer)

        if not chat_request.stream:
            reason = None
            async for _, reason in detokenizer.deltas(tokens):
                pass
            return completion.message(detokenizer.text, reason, len(detokenizer.token_ids))

        include_usage = chat_request.include_usage

        async def events() -> AsyncIterator[str]:
            yield completion.chunk({"role": "assistant", "content": ""}, None)
            async for text, reason in detokenizer.deltas(tokens):
                yield completion.chunk({"content": text} if text else {}, reason)
            if include_usage:
                yield completion.usage_chunk(len(detokenizer.token_ids))
            yield DONE_EVENT

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def main(argv: list[str] | None = None) -> None:
    parser = KitArgumentParser(prog="python -m labs.engine.server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=tcp_port, default=DEFAULT_PORT)
    add_flags(parser, ENGINE_FLAGS)
    parser.add_argument("--served-model-name", default=SERVED_MODEL_NAME)
    THREADS.add_to(parser, torch.get_num_threads())
    args = parser.parse_args(argv)
    try:
        config = EngineConfig.from_args(args)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    torch.set_num_threads(args.threads)
    engine = Engine(config, SmolLM2(MODEL_DIR, TORCH_DTYPES[config.dtype]))
    app = build_app(EngineLoop(engine), AutoTokenizer.from_pretrained(MODEL_DIR), args.served_model_name)
    print(f"teaching engine ({config.policy}, max batch {config.max_batch_size}) at http://{args.host}:{args.port}/v1",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
