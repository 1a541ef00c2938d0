"""The ports the tests and benchmarks give their servers (serve/processes/process.py): free, and out of the way of
the ports the kernel hands outgoing connections, which can take a port between its check and a server's bind."""

from __future__ import annotations

import socket

from serve.processes import process


def test_free_ports_lie_below_the_outgoing_range_and_are_never_repeated() -> None:
    outgoing_from = int(process.EPHEMERAL_RANGE.read_text().split()[0])
    ports = [process.free_port() for _ in range(50)]
    assert all(process.LISTEN_PORTS_FROM <= port < outgoing_from for port in ports), (outgoing_from, ports)
    assert len(set(ports)) == len(ports), ports


def test_a_port_in_use_is_never_handed_out(monkeypatch) -> None:
    """The only port to choose from is held by a listening server (as another process's would be): it is refused,
    and the OS's pick comes out instead."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(process, "listen_ports", lambda: range(taken, taken + 1))
        assert process.free_port() != taken


def test_a_run_of_ports_is_free_and_stays_below_the_outgoing_range() -> None:
    start = process.free_port_run("127.0.0.1", 4)
    assert all(process.port_is_free("127.0.0.1", start + offset) for offset in range(4))
    assert start + 4 <= process.listen_ports().stop
