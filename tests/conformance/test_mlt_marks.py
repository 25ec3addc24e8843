"""MLT's marks reach the wire: over loopback, every DATA datagram of a gradient part carries the
IP TOS byte of the part's level, and the worker's control datagrams carry the top level's.

A relay sits between one worker and the PS: the worker is told the PS is at the relay's first
socket, the PS that the worker is at its second, and the relay copies every datagram across. Its
first socket reads each datagram's TOS byte with ``IP_RECVTOS`` (no privileges, no capture), and
the LTP header gives the datagram's type and segment (``docs/ltp-protocol.md`` §2). Run with
``.venv/bin/pytest tests/conformance/test_mlt_marks.py``.
"""

import select
import socket
import threading

import numpy as np

from tests.conformance.loopback import on_free_ports
from transports import registry
from transports.base import Layout
from transports.mlt import level_dscp

LAYOUT = Layout.from_sizes([("front", 4000), ("back", 4000)])
WIRE_TYPE, WIRE_SEGMENT, T_DATA = 3, 16, 1   # the LTP header's type and segment fields
TIMEOUT_S = 20.0


class Relay:
    """Copies datagrams between ``worker`` (seen at ``a``) and ``ps`` (seen at ``b``), recording
    (type, segment, TOS byte) of every datagram the worker sends."""

    def __init__(self, a: int, b: int, worker: tuple, ps: tuple) -> None:
        self.a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.a.bind(("127.0.0.1", a))
        self.b.bind(("127.0.0.1", b))
        self.a.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        self.worker, self.ps = worker, ps
        self.seen: list[tuple[int, int, int]] = []
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop:
            ready, _, _ = select.select([self.a, self.b], [], [], 0.05)
            for s in ready:
                if s is self.b:
                    self.a.sendto(self.b.recv(65536), self.worker)
                    continue
                data, ancillary, _, _ = self.a.recvmsg(65536, socket.CMSG_SPACE(4))
                tos = [c[2][0] for c in ancillary
                       if c[0] == socket.IPPROTO_IP and c[1] == socket.IP_TOS]
                segment = int.from_bytes(data[WIRE_SEGMENT:WIRE_SEGMENT + 2], "little")
                self.seen.append((data[WIRE_TYPE], segment, tos[0] if tos else -1))
                self.b.sendto(data, self.ps)

    def close(self) -> None:
        self.stop = True
        self.thread.join()
        self.a.close()
        self.b.close()


def _push_through_relay(ports, options, gradient):
    ps_addr, w_addr = ("127.0.0.1", ports[0]), ("127.0.0.1", ports[1])
    relay = Relay(ports[2], ports[3], w_addr, ps_addr)
    t = registry.create("mlt", options)
    try:
        with t.serve(ps_addr, [("127.0.0.1", ports[3])], LAYOUT) as ps, \
                t.connect(0, w_addr, ("127.0.0.1", ports[2]), LAYOUT) as w:
            joined = threading.Thread(target=w.join, args=(TIMEOUT_S,))
            joined.start()
            ps.wait_for_workers(TIMEOUT_S)
            joined.join()
            pushed = threading.Thread(target=w.push, args=(0, gradient, TIMEOUT_S))
            pushed.start()
            got = ps.gather(0, TIMEOUT_S)[0]
            pushed.join()
    finally:
        relay.close()
    return got, relay.seen


def test_each_part_carries_its_level_and_control_the_top_one():
    levels = 3
    # The back layer is the important one by magnitude, so the marks do not follow layout order.
    gradient = np.concatenate([np.full(4000, 0.01), np.full(4000, 5.0)]).astype(np.float32)
    got, seen = on_free_ports(4, lambda ports: _push_through_relay(
        ports, {"levels": levels, "packet_payload_bytes": 1472, "linger_ms": 0}, gradient))
    np.testing.assert_array_equal(got.values, gradient)
    top, bottom = level_dscp(0, levels) << 2, level_dscp(levels - 1, levels) << 2
    assert top != bottom
    data = {}
    for kind, segment, tos in seen:
        if kind == T_DATA:
            data.setdefault(segment, set()).add(tos)
    # segment 1 + part index: the front layer (small gradient) is the last level, the back one
    # the top level, on every datagram
    assert data == {1: {bottom}, 2: {top}}
    control = {tos for kind, _, tos in seen if kind != T_DATA}
    assert control == {top}


def test_one_level_marks_nothing():
    gradient = np.linspace(-1, 1, LAYOUT.n_floats).astype(np.float32)
    got, seen = on_free_ports(4, lambda ports: _push_through_relay(
        ports, {"levels": 1, "packet_payload_bytes": 1472, "linger_ms": 0}, gradient))
    np.testing.assert_array_equal(got.values, gradient)
    assert {tos for _, _, tos in seen} == {0}
    assert registry.create("mlt", {"levels": 1}).bottleneck_queue() is None
