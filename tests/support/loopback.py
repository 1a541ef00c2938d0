"""A real HTTP server on 127.0.0.1 for the length of a `with` block: the tests' stand-ins and faults run on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler], port: int = 0) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1:`port` (0: one the OS picks) in a thread; yields the root URL."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
