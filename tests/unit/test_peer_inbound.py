"""The receiving half of the multicast peer transport, driven without sockets (it is sans-IO)."""

import collections

import numpy as np

from transports.peer import wire
from transports.peer.inbound import KEEP_CLOSED, Inbound

N_FLOATS, PAYLOAD, SID = 1000, 400, 77     # 10 datagrams of 100 floats
COUNT = 10


def _inbound(close_frac=1.0, min_frac=0.5):
    got, counters = [], collections.Counter()
    inbound = Inbound(0, N_FLOATS, PAYLOAD, SID, close_frac, min_frac, got.append, counters)
    return inbound, got, counters


def _data(round_, seq, sender=1, value=None):
    payload = np.full(100, seq if value is None else value, np.float32).tobytes()
    return wire.decode(memoryview(wire.data_header(sender, SID, round_, seq, COUNT) + payload))


def _poll(round_, pass_=1, sender=1):
    return wire.decode(memoryview(wire.encode(wire.POLL, sender, SID, round_, pass_, COUNT)))


def _close(round_, sender=1):
    return wire.decode(memoryview(wire.encode(wire.CLOSE, sender, SID, round_, COUNT)))


def _status(raw):
    d = wire.decode(memoryview(raw))
    target, pass_, flags, _, count, floats = d.tail
    return d.round, flags, floats, bytes(d.body)


def test_a_complete_message_is_delivered_whole_once():
    inbound, got, counters = _inbound()
    for seq in range(COUNT):
        inbound.on_data(_data(3, seq))
    inbound.on_data(_data(3, 4))   # a repair someone else asked for
    (m,) = got
    assert (m.sender, m.round, m.mask, m.received_frac, m.early) == (1, 3, None, 1.0, False)
    assert np.array_equal(m.values, np.repeat(np.arange(COUNT, dtype=np.float32), 100))
    assert counters["late"] == 1
    assert _status(inbound.on_poll(_poll(3))) == (3, wire.CLOSED, N_FLOATS, b"")


def test_a_poll_reports_a_bitmap_until_close_frac_is_reached():
    inbound, got, _ = _inbound(close_frac=0.8)
    for seq in range(7):
        inbound.on_data(_data(0, seq))
    round_, flags, floats, bitmap = _status(inbound.on_poll(_poll(0)))
    assert (flags, floats) == (0, 700) and not got
    assert np.array_equal(np.unpackbits(np.frombuffer(bitmap, np.uint8), count=COUNT),
                          [1] * 7 + [0] * 3)
    inbound.on_data(_data(0, 9))
    assert _status(inbound.on_poll(_poll(0, 2)))[1:3] == (wire.CLOSED, 800)
    (m,) = got
    assert m.early and m.received_frac == 0.8 and m.mask.sum() == 800
    assert not m.values[700:900].any()


def test_close_delivers_above_min_frac_and_drops_below():
    inbound, got, counters = _inbound(min_frac=0.5)
    for seq in range(6):
        inbound.on_data(_data(0, seq, sender=1))
    inbound.on_data(_data(0, 0, sender=2))
    assert _status(inbound.on_close(_close(0, sender=1)))[1:3] == (wire.CLOSED, 600)
    assert _status(inbound.on_close(_close(0, sender=2)))[1:3] == (wire.CLOSED | wire.DROPPED, 100)
    assert [(m.sender, m.received_frac) for m in got] == [(1, 0.6)]
    assert counters["dropped_below_min"] == 1
    # a CLOSE for a round nothing arrived of: dropped at once, and confirmed
    assert _status(inbound.on_close(_close(5, sender=3)))[1] == wire.CLOSED | wire.DROPPED


def test_a_newer_round_supersedes_an_open_one_and_old_rounds_are_stale():
    inbound, got, counters = _inbound(close_frac=0.5)
    for seq in range(3):
        inbound.on_data(_data(0, seq))           # 30 %: below close_frac, dropped when superseded
    for seq in range(6):
        inbound.on_data(_data(1, seq))           # 60 %: delivered early when superseded
    inbound.on_data(_data(2, 0))
    assert counters["superseded"] == 1 and [(m.round, m.early) for m in got] == [(1, True)]
    inbound.on_data(_data(0, 5))                 # round 0 is remembered as closed: late
    assert counters["late"] == 1
    for r in range(3, 3 + KEEP_CLOSED + 1):
        inbound.on_close(_close(r))
    inbound.on_data(_data(2, 1))                 # forgotten and older than the newest: stale
    assert inbound.on_poll(_poll(2)) is None and counters["stale"] == 2


def test_malformed_data_is_counted_not_stored():
    inbound, got, counters = _inbound()
    payload = np.zeros(100, np.float32).tobytes()
    for raw in (wire.data_header(1, SID, 0, COUNT, COUNT) + payload,       # seq out of range
                wire.data_header(1, SID, 0, 0, COUNT + 1) + payload,       # wrong count
                wire.data_header(1, SID, 0, 0, COUNT) + payload[:-4],      # short
                wire.data_header(1, SID, 0, COUNT - 1, COUNT) + payload + b"x"):  # long
        inbound.on_data(wire.decode(memoryview(raw)))
    assert counters["malformed"] == 4 and not got
    assert wire.decode(memoryview(b"LTPp\x02" + bytes(40))) is None   # another version
