"""A STAND-IN for a learner's Ollama, for tests only: no registry this machine reaches ships Ollama.

It answers what the kit asks of an Ollama to recognise it (`GET /api/version`, `GET /api/tags`, as Ollama's API
documents them) and passes `/v1/...` on, byte for byte and streamed, to a real engine (the kit's llama.cpp server
in the tests), the way a real Ollama serves its OpenAI-compatible API from llama.cpp. Nothing else of Ollama's
API is offered. The compose profile `ollama` is the real Ollama, for Docker users.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import httpx

from tests.support.loopback import loopback_server

VERSION = "0.12.3"  # what it says it is: the version compose.yaml's ollama profile pins
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
PROXY_TIMEOUT = httpx.Timeout(600, connect=10)


class StandIn(BaseHTTPRequestHandler):
    upstream: str | None  # the real engine's root URL, /v1 is passed to it; None: /v1 answers 502
    models: tuple[str, ...]

    def log_message(self, format: str, *args: object) -> None:  # quiet: the tests read their own output
        return

    def reply_json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/api/version":
            self.reply_json(200, {"version": VERSION})
        elif self.path == "/api/tags":
            self.reply_json(200, {"models": [{"name": name, "model": name} for name in self.models]})
        else:
            self.pass_on()

    def do_POST(self) -> None:
        self.pass_on()

    def pass_on(self) -> None:
        if not self.path.startswith("/v1/") or self.upstream is None:
            self.reply_json(404 if not self.path.startswith("/v1/") else 502, {"error": f"stand-in: {self.path}"})
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {key: value for key, value in self.headers.items() if key.lower() not in HOP_BY_HOP}
        with (
            httpx.Client(timeout=PROXY_TIMEOUT) as http,
            http.stream(self.command, f"{self.upstream}{self.path}", content=body, headers=headers) as answer,
        ):
            self.send_response(answer.status_code)
            for key, value in answer.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Connection", "close")  # HTTP/1.0: the body ends where the connection does
            self.end_headers()
            for chunk in answer.iter_raw():
                self.wfile.write(chunk)
                self.wfile.flush()


@contextmanager
def ollama_standin(
    port: int, upstream: str | None = None, models: tuple[str, ...] = ("smollm2:135m",)
) -> Iterator[str]:
    """The stand-in listening on 127.0.0.1:`port` for the `with` block; yields its root URL."""
    handler = type("BoundStandIn", (StandIn,), {"upstream": upstream, "models": models})
    with loopback_server(handler, port) as url:
        yield url
