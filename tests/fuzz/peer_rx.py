"""Fuzz target: the multicast peer transport's receiving half (issue 29, item 5).

The input is a program (a configuration byte, then operations) run against peer 0's receiving
half wired as :meth:`transports.peer.mcast.McastPeer._handle` wires it: every datagram through
the :class:`~transports.peer.auth.Gate`, then DATA, POLL and CLOSE to
:meth:`~transports.peer.inbound.Inbound.on_datagram`. Peers 1 and 2 are genuine senders (their own
:class:`~transports.peer.auth.Sealer`); their rounds go into a pool of datagrams, and the program
delivers pool entries whole (again, in any order: copies and replays), changed (a byte flipped,
cut short, the tag stripped, the round or sender rewritten), from the wrong address, sealed under
a guessed key with fields of its choosing, or raw bytes.

Invariants (a broken one raises, a crash to the fuzzer): nothing the receiving half does raises
(:class:`McastPeer` would count a ``handler_errors``); with ``auth`` on, every datagram the gate
lets through is byte for byte one a genuine sender sealed, and lets it through once; every message
delivered holds finite values, and (auth on) each coordinate is its sender's value or, masked
out, 0; every STATUS answer decodes as peer 0's.

``python -m tests.fuzz peer_rx [libFuzzer flags] CORPUS_DIR...`` runs it under atheris;
``python -m tests.fuzz.peer_rx DIR...`` runs each input once without it (``invoke fuzz`` does so
under ``coverage`` for the coverage per file), and the unit suite replays ``corpus/peer_rx``.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np

from transports.base import Session
from transports.peer import wire
from transports.peer.auth import Gate, Sealer
from transports.peer.inbound import Inbound

CORPUS = Path(__file__).parent / "corpus" / "peer_rx"
ADDRS = [("10.0.0.1", 6400), ("10.0.0.2", 6400), ("10.0.0.3", 6400)]
SESSION = Session(0x5EC7, bytes(range(32)))
GUESS = Session(SESSION.session_id, bytes(32))   # an outsider's: the id, not the key
PAYLOAD = 40                                     # 10 floats per DATA
POOL = 256
MAX_OPS = 200


class _Bytes:
    """The input, read front to back; zeros once it is used up."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def left(self) -> bool:
        return self.at < len(self.data)

    def u8(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def u16(self) -> int:
        return self.u8() | self.u8() << 8

    def take(self, n: int) -> bytes:
        out = self.data[self.at:self.at + n]
        self.at += len(out)
        return out


def value(sender: int, round_: int, i: np.ndarray) -> np.ndarray:
    """What genuine sender ``sender`` sends in coordinate ``i`` of ``round_``: never 0."""
    return (1 + sender * 1000 + (round_ % 97) * 10 + i % 7).astype(np.float32)


class Harness:
    """Peer 0's receiving half, its two genuine senders and the pool of what they sealed."""

    def __init__(self, conf: int) -> None:
        self.auth = bool(conf & 1)
        self.n_floats = 10 * (2 + (conf >> 1) % 6) - (conf >> 4) % 3   # 2 to 7 datagrams
        close_frac = (1.0, 0.9, 0.5, 0.2)[(conf >> 6) % 4]
        self.counters: collections.Counter = collections.Counter()
        self.got: list = []
        self.gate = Gate(0, ADDRS, SESSION, self.auth, 64, self.counters)
        self.inbound = Inbound(0, self.n_floats, PAYLOAD, Sealer(0, SESSION, self.auth, 0).seal,
                               close_frac, min(close_frac, 0.5), self.got.append, self.counters,
                               round_window=8)
        self.count = self.inbound.count
        self.senders = {s: Sealer(s, SESSION, self.auth, 1000 * s) for s in (1, 2)}
        self.rounds = {1: 0, 2: 0}
        self.pool: list[bytes] = []
        self.admitted: set[bytes] = set()

    # --- what the genuine senders seal -----------------------------------------------------

    def _add(self, raw: bytes) -> None:
        if len(self.pool) < POOL:
            self.pool.append(raw)

    def emit_round(self, b: _Bytes) -> None:
        s = 1 + b.u8() % 2
        self.rounds[s] += b.u8() % 3
        r, which = self.rounds[s], b.u16()
        values = value(s, r, np.arange(self.n_floats))
        for seq in range(self.count):
            if which >> (seq % 16) & 1:
                body = values[seq * (PAYLOAD // 4):(seq + 1) * (PAYLOAD // 4)].tobytes()
                self._add(self.senders[s].seal(wire.DATA, r, seq, self.count, body=body))

    def emit_control(self, b: _Bytes) -> None:
        s = 1 + b.u8() % 2
        r = max(0, self.rounds[s] - b.u8() % 2)
        if b.u8() & 1:
            self._add(self.senders[s].seal(wire.POLL, r, b.u8(), self.count))
        else:
            self._add(self.senders[s].seal(wire.CLOSE, r, self.count))

    # --- what arrives ----------------------------------------------------------------------

    def changed(self, b: _Bytes) -> bytes:
        raw = bytearray(self.pool[b.u8() % len(self.pool)])
        how = b.u8() % 5
        if how == 0:
            raw[b.u16() % len(raw)] ^= b.u8() | 1
        elif how == 1:
            del raw[b.u16() % len(raw):]
        elif how == 2:   # untagged: what an end without auth sends
            if self.auth:
                del raw[-wire.TAG_BYTES:]
            raw[wire.HEADER.size - 8] = wire.MAC_NONE   # the header's mac byte
        elif how == 3:
            raw[12:16] = (b.u16() << 8 | b.u8()).to_bytes(4, "big")   # the round
        else:
            raw[6:8] = (b.u8() % 4).to_bytes(2, "big")                # the sender
        return bytes(raw)

    def forged(self, b: _Bytes) -> bytes:
        """Sealed under a guessed key (or untagged, auth off), fields from the input."""
        sealer = Sealer(1 + b.u8() % 2, GUESS, self.auth, b.u16())
        kind = wire.KINDS[b.u8() % 4]
        tail = [b.u16() for _ in wire.TAILS[kind].format[1:]]
        if kind == wire.STATUS:
            tail = [b.u8() % 3, b.u16(), b.u8(), 0, self.count, b.u16()]
        return sealer.seal(kind, b.u16(), *tail, body=b.take(b.u8() % 48))

    def arrive(self, raw: bytes, sender: int) -> None:
        d = self.gate.admit(memoryview(raw), ADDRS[sender])
        if d is None:
            return
        if self.auth:
            assert raw in self.pool, "the gate let through a datagram no sender sealed"
            assert raw not in self.admitted, "the gate let a datagram through twice"
            self.admitted.add(raw)
        answer = self.inbound.on_datagram(d) if d.kind != wire.STATUS else None
        if answer is not None:
            a = wire.decode(memoryview(answer))
            assert a is not None and a.sender == 0 and a.kind == wire.STATUS, "a bad STATUS"
        self.check_delivered()

    def check_delivered(self) -> None:
        for m in self.got:
            assert m.values.shape == (self.n_floats,)
            if self.auth:   # without, a forged body may hold anything (docs/peer-transports.md)
                assert np.isfinite(m.values).all(), "a value that is not finite delivered"
                want = value(m.sender, m.round, np.arange(self.n_floats))
                held = np.ones(self.n_floats, bool) if m.mask is None else m.mask
                assert (m.values[held] == want[held]).all(), "a forged value delivered"
                assert (m.values[~held] == 0).all(), "a coordinate masked out is not 0"
        self.got.clear()


def run(data: bytes) -> None:
    """One input (see the module docstring)."""
    b = _Bytes(data)
    h = Harness(b.u8())
    for _ in range(MAX_OPS):
        if not b.left():
            break
        op = b.u8() % 8
        if op == 0:
            h.emit_round(b)
        elif op == 1:
            h.emit_control(b)
        elif op in (2, 3) and h.pool:
            h.arrive(h.pool[b.u8() % len(h.pool)], 1 + b.u8() % 2)
        elif op == 4 and h.pool:
            h.arrive(h.changed(b), 1 + b.u8() % 2)
        elif op == 5:
            h.arrive(h.forged(b), b.u8() % 3)
        elif op == 6:
            h.arrive(b.take(b.u8()), b.u8() % 3)
        elif op == 7:
            h.inbound.own_round = max(h.inbound.own_round, b.u8() % 32)


def replay(folders: list[str]) -> int:
    """Run every input in ``folders`` (for coverage); how many."""
    files = [f for folder in folders for f in sorted(Path(folder).iterdir()) if f.is_file()]
    for f in files:
        run(f.read_bytes())
    return len(files)


if __name__ == "__main__":
    print(f"replayed {replay(sys.argv[1:])} inputs")
