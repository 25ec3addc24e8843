"""The multicast peer transport's defences (issue 29, item 3), driven without sockets.

A review drove the receiving half with forged datagrams: all it took was a spoofed source address
and the session id (sent in clear). Each of its findings, and a replay, is an attack function
here; the receiving half is wired as :class:`transports.peer.mcast.McastPeer` wires it (every
datagram through the :class:`~transports.peer.auth.Gate`, then
:class:`~transports.peer.inbound.Inbound` or :class:`~transports.peer.outbound.Outbound`). The
``test_...`` of each attack runs with ``auth`` on (the default) and requires it to fail;
``test_without_auth_the_attacks_work`` runs the same functions with ``auth`` off and requires
them to succeed, which is the threat model's "auth off" column and shows that each defended
test's assertions would fail on the undefended path.
"""

import collections
import dataclasses

import numpy as np
import pytest

from transports.base import Session
from transports.peer import wire
from transports.peer.auth import Gate, Keyring, ReplayWindow, Sealer
from transports.peer.inbound import Inbound
from transports.peer.outbound import Outbound

N_FLOATS, PAYLOAD, COUNT = 1000, 400, 10     # 10 datagrams of 100 floats
ADDRS = [("10.0.0.1", 6400), ("10.0.0.2", 6400), ("10.0.0.3", 6400)]
SESSION = Session(0x5EC7, bytes(range(32)))
GUESS = Session(SESSION.session_id, bytes(32))   # what an attacker has: the id, not the key
ME = 0


@dataclasses.dataclass
class Receiver:
    """Peer 0's receiving half, as McastPeer._handle drives it."""

    auth: bool
    close_frac: float = 1.0
    counters: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    got: list = dataclasses.field(default_factory=list)
    answers: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.gate = Gate(ME, ADDRS, SESSION, self.auth, 4096, self.counters)
        self.inbound = Inbound(ME, N_FLOATS, PAYLOAD, Sealer(ME, SESSION, self.auth).seal,
                               self.close_frac, 0.5, self.got.append, self.counters)
        self.out = None

    def feed(self, raw, sender=1):
        """One datagram from ``sender``'s address."""
        d = self.gate.admit(memoryview(raw), ADDRS[sender])
        if d is None:
            return
        if d.kind != wire.STATUS:
            answer = self.inbound.on_datagram(d)
            if answer is not None:
                self.answers.append(answer)
        elif self.out is not None:
            self.out.on_status(d, ME, COUNT, N_FLOATS, self.counters)


def _genuine(sender, auth=True):
    return Sealer(sender, SESSION, auth)


def _forger(sender, auth):
    """Datagrams "from" ``sender`` by someone without the key: with auth on the best they can do
    is a tag under a guessed key; with auth off they need none."""
    return Sealer(sender, GUESS, auth)


def _data(sealer, round_, seq, values):
    payload = np.full(PAYLOAD // 4, values, np.float32).tobytes()
    return b"".join(sealer.parts(wire.DATA, round_, seq, COUNT, body=payload))


def _round(rx, sealer, round_, seqs=range(COUNT), value=1.0, step=1.0, sender=1):
    """Datagrams ``seqs`` of ``round_``; datagram ``seq`` holds ``value + step * seq``."""
    for seq in seqs:
        rx.feed(_data(sealer, round_, seq, value + step * seq), sender)


def _expected(value=1.0):
    return np.repeat(value + np.arange(COUNT, dtype=np.float32), PAYLOAD // 4)


# --- the attacks: each returns what the receiver delivered or decided -------------------------

def attack_all_zero_round(auth):
    """A forged round 0 of zeros, whole, before the genuine one."""
    rx = Receiver(auth)
    _round(rx, _forger(1, auth), 0, value=0.0, step=0.0)
    _round(rx, _genuine(1, auth), 0)
    return rx


def attack_first_copy(auth):
    """A forged copy of datagram 0 holding +inf, just before the genuine round."""
    rx = Receiver(auth)
    rx.feed(_data(_forger(1, auth), 0, 0, np.inf))
    _round(rx, _genuine(1, auth), 0)
    return rx


def attack_far_future_round(auth):
    """One DATA of round 0xFFFFFFFF, then ten genuine rounds."""
    rx = Receiver(auth)
    rx.feed(_data(_forger(1, auth), 0xFFFFFFFF, 0, 0.0))
    sealer = _genuine(1, auth)
    for r in range(10):
        _round(rx, sealer, r)
    return rx


def attack_forged_close(auth):
    """Nine of ten datagrams arrived; a forged CLOSE; then the tenth (a repair)."""
    rx = Receiver(auth)
    sealer = _genuine(1, auth)
    _round(rx, sealer, 0, range(COUNT - 1))
    rx.feed(_forger(1, auth).seal(wire.CLOSE, 0, COUNT))
    _round(rx, sealer, 0, [COUNT - 1])
    return rx


def attack_forged_status(auth):
    """Peer 0 sends round 3 to peers 1 and 2; a forged closed STATUS "from" 1."""
    rx = Receiver(auth)
    rx.out = Outbound(3, [1, 2])
    rx.feed(_forger(1, auth).seal(wire.STATUS, 3, ME, 0, wire.CLOSED, 0, COUNT, N_FLOATS))
    return rx


def attack_replayed_poll(auth):
    """A genuine POLL, captured and sent again 99 times (each makes a STATUS if answered)."""
    rx = Receiver(auth)
    sealer = _genuine(1, auth)
    _round(rx, sealer, 0, range(5))
    poll = sealer.seal(wire.POLL, 0, 1, COUNT)
    for _ in range(100):
        rx.feed(poll)
    return rx


# --- with auth on, every one fails -------------------------------------------------------------

def test_a_forged_all_zero_round_is_not_delivered():
    rx = attack_all_zero_round(auth=True)
    (m,) = rx.got
    assert m.mask is None and np.array_equal(m.values, _expected())
    assert rx.counters["bad_mac"] == COUNT and rx.counters["delivered"] == 1


def test_a_forged_first_copy_is_not_kept():
    rx = attack_first_copy(auth=True)
    (m,) = rx.got
    assert np.isfinite(m.values).all() and np.array_equal(m.values, _expected())
    assert rx.counters["bad_mac"] == 1 and rx.counters["duplicate_data"] == 0


def test_a_far_future_round_stops_no_genuine_round():
    rx = attack_far_future_round(auth=True)
    assert [m.round for m in rx.got] == list(range(10))
    assert all(m.mask is None for m in rx.got)
    assert rx.counters["bad_mac"] == 1 and rx.counters["stale"] == 0


def test_a_forged_close_forces_no_early_delivery():
    rx = attack_forged_close(auth=True)
    (m,) = rx.got
    assert not m.early and m.mask is None and m.received_frac == 1.0
    assert rx.counters["bad_mac"] == 1 and rx.answers == []


def test_a_forged_closed_status_ends_no_repair():
    rx = attack_forged_status(auth=True)
    assert rx.out.open() == [1, 2] and rx.out.closed == {}
    assert rx.counters["bad_mac"] == 1


def test_a_replayed_datagram_is_refused():
    rx = attack_replayed_poll(auth=True)
    assert len(rx.answers) == 1 and rx.counters["replayed"] == 99
    # and a replayed DATA never reaches the message (not even as a duplicate)
    sealer = _genuine(1)
    raw = _data(sealer, 1, 0, 7.0)
    rx.feed(raw)
    rx.feed(raw)
    assert rx.counters["replayed"] == 100 and rx.counters["duplicate_data"] == 0


def test_a_far_future_round_with_a_valid_tag_is_refused_by_the_round_window():
    """A key holder (any worker of the run), or a sender's bug: the tag is right, the round
    is not; the round window refuses it, and later genuine rounds arrive."""
    rx = Receiver(auth=True)
    sealer = _genuine(1)
    rx.feed(_data(sealer, 0xFFFFFFFF, 0, 0.0))
    for r in range(10):
        _round(rx, sealer, r)
    assert [m.round for m in rx.got] == list(range(10))
    assert rx.counters["out_of_window"] == 1 and rx.counters["bad_mac"] == 0


def test_the_round_window_holds_with_auth_off_too():
    rx = attack_far_future_round(auth=False)
    assert [m.round for m in rx.got] == list(range(10))
    assert rx.counters["out_of_window"] == 1


# --- with auth off, they work (the threat model's auth-off column) -----------------------------

def test_without_auth_the_attacks_work():
    zero = attack_all_zero_round(auth=False).got
    assert zero[0].mask is None and not zero[0].values.any()          # zeros delivered whole
    inf = attack_first_copy(auth=False).got
    assert np.isinf(inf[0].values).any()                              # +inf delivered
    close = attack_forged_close(auth=False).got
    assert close[0].early and close[0].received_frac == pytest.approx(0.9)
    assert attack_forged_status(auth=False).out.open() == [2]         # 1's repair ended
    assert len(attack_replayed_poll(auth=False).answers) == 100       # a STATUS per replay


# --- the pieces -------------------------------------------------------------------------------

def test_any_changed_byte_fails_the_tag():
    raw = bytearray(_data(_genuine(1), 0, 3, 2.0))
    for at in (4, 7, 8, 12, 16, 17, 20, 25, 30, len(raw) // 2, len(raw) - 1):
        rx = Receiver(auth=True)
        forged = bytearray(raw)
        forged[at] ^= 0x01
        rx.feed(bytes(forged))
        assert sum(rx.counters.values()) == 1 and not rx.inbound._open, at
        assert set(rx.counters) <= {"bad_mac", "malformed", "foreign", "stranger"}, at
    rx = Receiver(auth=True)
    rx.feed(bytes(raw))
    assert rx.counters["bad_mac"] == 0 and 1 in rx.inbound._open


def test_a_tag_is_good_only_for_its_sender_and_run():
    rx = Receiver(auth=True)
    from_2 = _data(_genuine(2), 0, 0, 1.0)
    relabelled = bytearray(from_2)
    relabelled[6:8] = (1).to_bytes(2, "big")          # "from 1", sealed with 2's key
    rx.feed(bytes(relabelled), sender=1)
    other_run = Sealer(1, Session(SESSION.session_id, bytes(range(1, 33))), True)
    rx.feed(_data(other_run, 0, 0, 1.0))
    assert rx.counters["bad_mac"] == 2 and not rx.inbound._open
    assert SESSION.sender_key(1) != SESSION.sender_key(2)
    assert SESSION.sender_key(1) == SESSION.sender_key(1)


def test_the_mac_must_match_the_mode():
    on, off = Receiver(auth=True), Receiver(auth=False)
    on.feed(_data(_genuine(1, auth=False), 0, 0, 1.0))      # untagged at auth on
    off.feed(_data(_genuine(1, auth=True), 0, 0, 1.0))      # a tag auth off cannot check
    assert on.counters["bad_mac"] == off.counters["bad_mac"] == 1
    assert not on.inbound._open and not off.inbound._open


def test_refused_datagrams_touch_no_state():
    rx = Receiver(auth=True)
    forger = _forger(1, True)
    for pseq_round in range(50):
        rx.feed(_data(forger, pseq_round, 0, 0.0))
    assert rx.gate._windows == {} and rx.inbound._open == {} and rx.inbound._latest == {}
    assert set(rx.counters) == {"bad_mac"}


def test_the_replay_window():
    w = ReplayWindow(64)
    assert [w.accept(p) for p in (1000, 998, 1001, 999)] == [None] * 4   # reordered: fine
    assert w.accept(998) == "replayed" and w.accept(1001) == "replayed"
    assert w.accept(1001 - 64) == "too_old" and w.accept(1001 - 63) is None
    assert w.accept(1 << 40) is None and w.accept(1001) == "too_old"    # a jump resets it
    assert w.accept((1 << 40) - 63) is None and w.bits < 1 << 64


def test_a_tagged_forgery_cannot_move_the_window():
    rx = Receiver(auth=True)
    sealer = Sealer(1, SESSION, True, first_pseq=10)
    high = Sealer(1, GUESS, True, first_pseq=wire.PSEQ_LIMIT - 1)
    rx.feed(_data(high, 0, 0, 0.0))
    _round(rx, sealer, 0)
    assert len(rx.got) == 1 and rx.counters["too_old"] == 0


def test_sealed_sizes():
    sealer, plain = _genuine(1), _genuine(1, auth=False)
    assert len(b"".join(sealer.parts(wire.DATA, 0, 0, COUNT, body=bytes(PAYLOAD)))) == (
        wire.HEADER.size + wire.DATA_TAIL.size + PAYLOAD + wire.TAG_BYTES)
    assert len(plain.seal(wire.CLOSE, 0, COUNT)) == wire.HEADER.size + wire.CLOSE_TAIL.size
    assert len(sealer.seal(wire.POLL, 0, 1, COUNT)) == 24 + 4 + 16
    assert wire.MAX_PAYLOAD_BYTES + 24 + 4 + 16 + wire.IP_UDP_BYTES == wire.MTU_BYTES
    a, b = (wire.decode(memoryview(sealer.seal(wire.POLL, 0, 1, COUNT))) for _ in range(2))
    assert b.pseq == a.pseq + 1 and a.mac == wire.MAC_BLAKE2B and len(a.tag) == 16
    assert Keyring(SESSION).mac(1).digest_size == wire.TAG_BYTES
