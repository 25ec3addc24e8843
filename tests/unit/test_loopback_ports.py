"""The loopback tests' port helper: a port taken between probe and bind costs a retry, not a
failure; any other error still fails at once."""

import errno
import socket

import pytest

from tests.conformance import loopback


def test_ports_are_distinct_and_bind_for_udp_and_tcp():
    ports = loopback.free_ports(6)
    assert len(set(ports)) == 6
    for port in ports:
        for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
            with socket.socket(socket.AF_INET, kind) as s:
                s.bind(("127.0.0.1", port))


def test_a_port_taken_in_between_is_retried_on_fresh_ports():
    seen = []

    def job(ports):
        seen.append(ports)
        if len(seen) < 3:   # as a worker thread reports it: (rank, exception) pairs in a list
            raise AssertionError([(1, OSError(errno.EADDRINUSE, "Address already in use"))])
        return "done"

    assert loopback.on_free_ports(3, job) == "done"
    assert len(seen) == 3


def test_other_errors_and_the_last_attempt_fail():
    calls = []

    def broken(ports):
        calls.append(ports)
        raise ValueError("not a port problem")

    with pytest.raises(ValueError):
        loopback.on_free_ports(2, broken)
    assert len(calls) == 1

    def always_taken(ports):
        raise RuntimeError("opening the LTP socket: bind failed (EADDRINUSE: in use)")

    with pytest.raises(RuntimeError):
        loopback.on_free_ports(2, always_taken)
