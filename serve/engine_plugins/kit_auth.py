"""An ASGI middleware the kit loads into vLLM's API server (`--middleware kit_auth.RequireKeyEverywhere`).

vLLM checks VLLM_API_KEY only on paths under /v1 (and /v2, /inference, /cohere in 0.32; /v1 alone in
0.9.1): `POST /invocations`, `/tokenize`, `/detokenize`, `/pooling`, `/score` ... answer without it. When
a key is set, this requires it on every path but the few that serve no model output:
/health and /ping (liveness probes, Docker's healthcheck), /metrics (Prometheus, KEDA) and /version.

It runs inside vLLM's own venv, so it imports nothing but the standard library.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

OPEN_PATHS = frozenset({"/health", "/ping", "/metrics", "/version"})
# OpenAI's error object, as its API answers a missing or wrong key (the SDK raises AuthenticationError with the
# message); vLLM's own check answers {"error": "Unauthorized"}, a string where clients expect this object
UNAUTHORIZED = {
    "error": {
        "message": "Unauthorized: send Authorization: Bearer <VLLM_API_KEY>",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class RequireKeyEverywhere:
    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        key = os.environ.get("VLLM_API_KEY", "")
        self.key_digest = hashlib.sha256(key.encode()).digest() if key else None

    def authorized(self, scope: Scope) -> bool:
        if self.key_digest is None:  # no key set: every request passes, as in __call__
            return True
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            hashlib.sha256(token.encode()).digest(), self.key_digest
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.key_digest is None or scope["type"] not in ("http", "websocket") or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        if path in OPEN_PATHS or self.authorized(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps(UNAUTHORIZED).encode()
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
