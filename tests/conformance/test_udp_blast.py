"""The lab 3 transport survives a lost hello answer and a message its sender has left behind."""

import socket
import sys
import time
from pathlib import Path

import numpy as np

from transports import registry
from transports.base import Layout

registry.load_plugins(str(Path(__file__).resolve().parents[2] / "docs/labs/code/udp_blast.py"))
blast = sys.modules["ltp_plugin_udp_blast"]
LAYOUT = Layout.from_sizes([("w", 1000)])


def _pair():
    options = dict(blast.UdpBlast.DEFAULTS)
    a = blast._Socket(options, 1, ("127.0.0.1", 0), [], LAYOUT)
    b = blast._Socket(options, blast.PS_RANK, ("127.0.0.1", 0), [], LAYOUT)
    return a, b


def test_a_superseded_message_closes_at_once():
    sender, receiver = _pair()
    try:
        sender.send(receiver.sock.getsockname(), 1, np.ones(LAYOUT.n_floats, np.float32))
        t0 = time.monotonic()
        [late] = receiver.receive([1], 0, timeout_s=30.0)
        assert time.monotonic() - t0 < 5.0
        assert late.received_frac == 0.0
        [current] = receiver.receive([1], 1, timeout_s=30.0)
        assert current.received_frac == 1.0
    finally:
        sender.close()
        receiver.close()


def test_join_keeps_data_that_arrives_instead_of_the_answer():
    ps = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ps.bind(("127.0.0.1", 0))
    transport = registry.create("udp-blast", {})
    worker = transport.connect(0, ("127.0.0.1", 0), ps.getsockname(), LAYOUT)
    try:
        # The PS's answer to hello is lost; its first parameters are the next thing the worker sees.
        values = np.arange(LAYOUT.n_floats, dtype=np.float32)
        dgram = blast.HEADER.pack(blast.MAGIC, blast.PS_RANK, 0, 0, LAYOUT.n_floats,
                                  LAYOUT.n_floats) + values.tobytes()
        ps.sendto(dgram, worker.net.sock.getsockname())
        worker.join(timeout_s=5.0)
        got = worker.pull(0, timeout_s=5.0)
        assert got.received_frac == 1.0
        np.testing.assert_array_equal(got.values, values)
    finally:
        worker.close()
        ps.close()
