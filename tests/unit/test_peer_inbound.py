"""The receiving half of the multicast peer transport, driven without sockets (it is sans-IO)."""

import collections

import numpy as np

from transports.base import Session
from transports.peer import wire
from transports.peer.auth import Sealer
from transports.peer.inbound import KEEP_CLOSED, Inbound

N_FLOATS, PAYLOAD = 1000, 400     # 10 datagrams of 100 floats
COUNT = 10
SESSION = Session(77, bytes(range(32)))
SEALERS = {rank: Sealer(rank, SESSION, auth=False, first_pseq=0) for rank in range(4)}


def _inbound(close_frac=1.0, min_frac=0.5, **keywords):
    got, counters = [], collections.Counter()
    inbound = Inbound(0, N_FLOATS, PAYLOAD, SEALERS[0].seal, close_frac, min_frac, got.append,
                      counters, **keywords)
    return inbound, got, counters


def _decode(parts):
    return wire.decode(memoryview(b"".join(parts)))


def _data(round_, seq, sender=1, value=None, count=COUNT, payload=None):
    if payload is None:
        payload = np.full(100, seq if value is None else value, np.float32).tobytes()
    return _decode(SEALERS[sender].parts(wire.DATA, round_, seq, count, body=payload))


def _poll(round_, pass_=1, sender=1):
    return _decode([SEALERS[sender].seal(wire.POLL, round_, pass_, COUNT)])


def _close(round_, sender=1):
    return _decode([SEALERS[sender].seal(wire.CLOSE, round_, COUNT)])


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
    for d in (_data(0, COUNT, payload=payload),                  # seq out of range
              _data(0, 0, count=COUNT + 1, payload=payload),     # wrong count
              _data(0, 0, payload=payload[:-4]),                 # short
              _data(0, COUNT - 1, payload=payload + b"x")):      # long
        inbound.on_data(d)
    assert counters["malformed"] == 4 and not got
    assert wire.decode(memoryview(b"LTPp\x01" + bytes(40))) is None   # version 1
    assert wire.decode(memoryview(b"LTPp\x03" + bytes(40))) is None   # another version


def test_a_round_far_past_progress_is_refused_and_opens_nothing():
    inbound, got, counters = _inbound(round_window=5)
    inbound.on_data(_data(5, 0))                 # progress -1: the window is rounds 0 to 4
    assert counters["out_of_window"] == 1
    inbound.on_data(_data(4, 0))                 # inside: opens round 4, progress 4
    inbound.on_data(_data(9, 0, sender=2))       # another sender, inside 4 + 5
    inbound.own_round = 20                       # this peer sent round 20: its progress moves
    for seq in range(COUNT):
        inbound.on_data(_data(25, seq, sender=3))
    assert counters["out_of_window"] == 1 and [m.round for m in got] == [25]
    assert inbound.on_poll(_poll(26 + 5, sender=3)) is None
    assert counters["out_of_window"] == 2 and counters["stale"] == 0
