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

SIGUSR1 (the supervisor of the second server sends it once that one listens) tells the first server to keep no
connection alive: an idle one is closed now, one with a request in flight once its answer (a whole stream) is sent.
A client's next request opens a new connection, which goes to the second server. Then nothing holds the first one.
Standard library only, but for uvicorn (vLLM's), found in the server's own process.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import runpy
import signal
import socket
import struct
import sys

VARIABLE = "KIT_SHARED_PORT"
SO_ATTACH_REUSEPORT_CBPF = 51  # include/uapi/asm-generic/socket.h
BPF_RET_K = 0x06  # BPF_RET | BPF_K: return the constant k
SUCCESSOR_INDEX = 1  # the second socket to listen in the group


def steer_to_successor(sock: socket.socket) -> None:
    """Every new connection of the port's group to the socket at SUCCESSOR_INDEX, once it exists."""
    program = ctypes.create_string_buffer(struct.pack("HBBI", BPF_RET_K, 0, 0, SUCCESSOR_INDEX))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, struct.pack("HP", 1, ctypes.addressof(program)))


SERVERS: list[object] = []  # the uvicorn servers of this process (vLLM's one)


def remember_servers() -> None:
    """Keep each uvicorn.Server vLLM makes (launcher.py, serve_http): SIGUSR1 reaches its connections."""
    import uvicorn

    made = uvicorn.Server.__init__

    def __init__(self: uvicorn.Server, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)
        SERVERS.append(self)

    uvicorn.Server.__init__ = __init__


def keep_nothing_alive() -> None:
    """Each connection of this process's uvicorn server closes once it holds no request (uvicorn's own step of a
    graceful shutdown, without stopping the server)."""
    for server in SERVERS:
        for connection in list(server.server_state.connections):  # type: ignore[attr-defined]
            connection.shutdown()
    print("kit: the compiled engine takes the port over: no connection is kept alive now", file=sys.stderr, flush=True)


def share_vllm_socket() -> None:
    from vllm.entrypoints.launchers import launcher

    create = launcher.create_server_socket

    def create_server_socket(addr: tuple[str, int], *, reuse_port: bool) -> socket.socket:
        sock = create(addr, reuse_port=True)
        if os.environ.get(VARIABLE) == "first":
            steer_to_successor(sock)
            # in run_server, on its event loop: the handler runs there, between two of its callbacks
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, keep_nothing_alive)
        return sock

    launcher.create_server_socket = create_server_socket  # setup_server looks it up at call time
    remember_servers()


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m kit_shared_port MODULE [ARGS...]")
    module = sys.argv[1]
    share_vllm_socket()
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
