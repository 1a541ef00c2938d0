"""Runs vLLM's API server on a port it shares with another one, for a hand-over without a failed request.

`python -m kit_shared_port vllm.entrypoints.openai.api_server ARGS` runs that module as `python -m` would, with
SO_REUSEPORT on the listening socket vLLM creates (vllm/entrypoints/launchers/launcher.py, create_server_socket; its
single API server leaves it off). Two servers of the same user may then listen on one port; the kernel hands each new
connection to one of them (serve/engines/hand_over.py tells why the kit runs two).

KIT_SHARED_PORT=first (the server that answers while the other one starts) also attaches a classic BPF program to
the port's group of sockets, SO_ATTACH_REUSEPORT_CBPF, that picks the socket at index 1: the one that starts
listening second. While that one is still loading (vLLM binds its port first and listens only once the engine is
ready), the group has one socket, index 1 does not exist and the kernel picks the first server; from the moment the
second listens, every new connection goes to it. Connections the first server already holds stay with it until
their requests end. No connection waits in a queue that is then closed, as it would if the first server merely
stopped while the second listened beside it.

SIGUSR1 (the supervisor of the second server sends it once that one listens) tells the first server to end each
connection with its next answer, saying so (`Connection: close`); a request in flight finishes first (a whole
stream). The client's next request opens a new connection, which goes to the second server. Then nothing holds the
first one.
Standard library only, but for uvicorn (vLLM's), found in the server's own process.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import os
import runpy
import signal
import socket
import struct
import sys
from typing import Any

VARIABLE = "KIT_SHARED_PORT"
SO_ATTACH_REUSEPORT_CBPF = 51  # include/uapi/asm-generic/socket.h
BPF_RET_K = 0x06  # BPF_RET | BPF_K: return the constant k
SUCCESSOR_INDEX = 1  # the second socket to listen in the group


def steer_to_successor(sock: socket.socket) -> None:
    """Every new connection of the port's group to the socket at SUCCESSOR_INDEX, once it exists."""
    program = ctypes.create_string_buffer(struct.pack("HBBI", BPF_RET_K, 0, 0, SUCCESSOR_INDEX))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, struct.pack("HP", 1, ctypes.addressof(program)))


HANDING_OVER = False  # set by SIGUSR1: every answer from now on closes its connection
CLOSE = (b"connection", b"close")


def answer_and_close() -> None:
    global HANDING_OVER
    HANDING_OVER = True
    print("kit: the compiled engine has the port: each answer now closes its connection", file=sys.stderr, flush=True)


def close_when_handing_over() -> None:
    """Each answer that starts after SIGUSR1 carries `Connection: close`, and uvicorn closes the connection once it
    is sent: the client reads that it must not reuse it, and its next request opens a new connection (which goes to
    the compiled engine). Closing a kept-alive connection without saying so races the client's next request on it
    (a reset, seen in tests/serve/engines/test_hand_over.py); an idle one closes at uvicorn's keep-alive timeout."""
    for name in ("uvicorn.protocols.http.httptools_impl", "uvicorn.protocols.http.h11_impl"):
        try:
            cycle = importlib.import_module(name).RequestResponseCycle
        except ImportError:  # httptools is optional to uvicorn
            continue
        send = cycle.send

        async def send_closing(self: object, message: dict[str, Any], send: Any = send) -> None:
            if HANDING_OVER and message.get("type") == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), CLOSE]}
            await send(self, message)

        cycle.send = send_closing


def share_vllm_socket() -> None:
    from vllm.entrypoints.launchers import launcher

    create = launcher.create_server_socket

    def create_server_socket(addr: tuple[str, int], *, reuse_port: bool) -> socket.socket:
        sock = create(addr, reuse_port=True)
        if os.environ.get(VARIABLE) == "first":
            try:
                steer_to_successor(sock)
            except OSError as exc:  # a kernel without it (Linux < 4.5): both share new connections until the stop
                print(f"kit: no BPF steering on this kernel ({exc}): the engines share the port", file=sys.stderr)
            # in run_server, on its event loop: the handler runs there, between two of its callbacks
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, answer_and_close)
        return sock

    launcher.create_server_socket = create_server_socket  # setup_server looks it up at call time
    close_when_handing_over()


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m kit_shared_port MODULE [ARGS...]")
    module = sys.argv[1]
    share_vllm_socket()
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
