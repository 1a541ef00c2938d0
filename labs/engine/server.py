"""The teaching engine behind a minimal OpenAI-compatible API, so the kit's load tester measures it like vLLM.

    .kit/vllm/bin/python -m labs.engine.server --port 8012 --max-batch 16

Serves `POST /v1/chat/completions` and `POST /v1/completions` (streaming with `stream_options.include_usage`, or
not; `max_tokens`, `stop`, `temperature`), `GET /v1/models`, `GET /health` and a few vLLM-named gauges on
`GET /metrics`. One thread runs the engine loop; requests
reach it through a queue and tokens come back to each HTTP handler through its own asyncio queue.
This module wires the pieces and parses the command line: engine_loop (the thread), gauges, openai_shapes
and openai_requests (what is answered and accepted), stop_strings, detokenizer (token ids to text deltas).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from transformers import AutoTokenizer

from labs.engine.config import THREADS, EngineConfig, add_flags
from labs.engine.detokenizer import Detokenizer
from labs.engine.engine_loop import EngineLoop
from labs.engine.llm_engine import LLMEngine
from labs.engine.model import SmolLM2
from labs.engine.model_runner import DTYPES as TORCH_DTYPES
from labs.engine.openai_requests import GenerationRequest, parse_chat, parse_completion
from labs.engine.openai_shapes import DONE_EVENT, ChatAnswer, RequestError, TextAnswer, model_list
from labs.engine.stop_strings import StopStrings, until_stop
from serve.config.model import BUNDLED_MODEL_NAME, MODEL_DIR
from ui.cli import KitArgumentParser, tcp_port

SERVED_MODEL_NAME = BUNDLED_MODEL_NAME
DEFAULT_PORT = 8012
Parse = Callable[[bytes, object, str, int], GenerationRequest]  # (body, tokenizer, model name, max_model_len)
ENGINE_FLAGS = ("policy", "max_batch_size", "block_size", "num_blocks", "enable_prefix_caching", "dtype")


def build_app(loop: EngineLoop, tokenizer, model_name: str) -> FastAPI:
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

    async def answer(raw_body: bytes, parse: Parse, shape: type[ChatAnswer]):
        try:
            request = parse(raw_body, tokenizer, model_name, max_model_len)
        except RequestError as refused:
            return JSONResponse(refused.body(), status_code=refused.status)
        answer = shape(model_name, len(request.prompt_token_ids))
        detokenizer = Detokenizer(tokenizer)
        deltas = until_stop(
            detokenizer.deltas(loop.stream(request.prompt_token_ids, request.params)), StopStrings(request.stop)
        )

        if not request.stream:
            text, reason = "", None
            async for delta, delta_reason in deltas:
                text += delta
                reason = delta_reason  # the last one's: the finish reason
            return answer.message(text, reason, len(detokenizer.token_ids))

        include_usage = request.include_usage

        async def events() -> AsyncIterator[str]:
            if (first := answer.first_chunk()) is not None:
                yield first
            async for delta, reason in deltas:
                yield answer.chunk(delta, reason)
            if include_usage:
                yield answer.usage_chunk(len(detokenizer.token_ids))
            yield DONE_EVENT

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await answer(await request.body(), parse_chat, ChatAnswer)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await answer(await request.body(), parse_completion, TextAnswer)

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
    engine = LLMEngine(config, SmolLM2(MODEL_DIR, TORCH_DTYPES[config.dtype]))
    app = build_app(EngineLoop(engine), AutoTokenizer.from_pretrained(MODEL_DIR), args.served_model_name)
    print(
        f"teaching engine ({config.policy}, max batch {config.max_batch_size}) at http://{args.host}:{args.port}/v1",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
