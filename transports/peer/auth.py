"""What the multicast peer transport trusts: per-sender keys, the MAC, the replay window, the gate.

Sans-IO, like :mod:`transports.peer.inbound`: nothing here opens a socket. A sender seals every
datagram it emits with a :class:`Sealer`; a receiver passes every datagram it reads through a
:class:`Gate`, which hands on only those that are its run's peers' own, once.

**Keys.** Sender ``s``'s key is the run's :class:`~transports.session.Session` key named
``sender:s`` (:meth:`~transports.session.Session.sender_key`, 32 bytes): the runner derives it
from the run's secret, which no host holds, and hands it to every peer of the run through a pipe
(:mod:`harness.running.keys`). A datagram is tagged with its sender's key, so one tag serves
every receiver a multicast copy reaches; the price is that every receiver holds every sender's
key, so a peer of the run can forge another peer's datagrams (an outsider cannot). Tags under
the keys of pairs (one per receiver) would close that, and the wire's ``mac`` byte can name such
a layout without a new header; keys come only from :class:`Keyring`, which is what changes.

**The MAC** (``mac`` = :data:`~transports.peer.wire.MAC_BLAKE2B`): BLAKE2b keyed with the
sender's key, personalised "ltp-peer-mac", 16-byte output, over every byte of the datagram
before the tag (header, tail, body). BLAKE2b's keyed mode is a MAC by design (no HMAC
construction around it: one pass over the data), it is in Python's standard library
(``hashlib``), and in software it is faster per byte than SHA-256, which HMAC-SHA256 would run
twice. Tags are compared with :func:`hmac.compare_digest` (constant time). 16 bytes leave a
forger one chance in 2^128 per try; the 8 more bytes than LTP's 64-bit SipHash tag cost about
half a percent of a DATA datagram.

**The replay window** (auth on only): each sender numbers its datagrams (``pseq``, 48 bits); a
receiver keeps, per sender, the highest number it accepted and a bitmap of the ``replay_window``
numbers below it, and refuses a number it has accepted (``replayed``) or one more than the window
behind the highest (``too_old``). It is updated only after the tag checked out, so a forger
cannot move it. With auth off it is not kept: anyone can write any ``pseq``, and one forged high
number would then lock a sender out.

A sender's numbers start at its host's monotonic clock in microseconds, so an end reopened in
the same session (a restarted process) starts above the numbers its earlier incarnation used,
as long as that one emitted fewer than one datagram per microsecond on average.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import threading
import time
from collections.abc import Sequence

from transports.base import Addr, Session
from transports.peer import wire

MAC_PERSON = b"ltp-peer-mac"    # BLAKE2b personalisation of the tags


class Keyring:
    """Every sender's MAC, keyed on first use with the session's key of that sender: the one
    place keys come from."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._macs: dict[int, hashlib.blake2b] = {}

    def mac(self, sender: int) -> hashlib.blake2b:
        """A BLAKE2b object keyed for ``sender``, its key block already absorbed: ``copy()`` it
        and feed the datagram."""
        mac = self._macs.get(sender)
        if mac is None:
            mac = self._macs[sender] = hashlib.blake2b(
                key=self._session.sender_key(sender), digest_size=wire.TAG_BYTES,
                person=MAC_PERSON)
        return mac


def tag(mac: hashlib.blake2b, *parts: bytes | memoryview) -> bytes:
    """The tag of ``parts`` one after the other under the keyed ``mac`` (left untouched)."""
    h = mac.copy()
    for part in parts:
        h.update(part)
    return h.digest()


class ReplayWindow:
    """One sender's accepted datagram numbers: the highest, and a bitmap of the ``size`` below
    it (bit ``k`` is number ``top - k``)."""

    __slots__ = ("size", "top", "bits")

    def __init__(self, size: int) -> None:
        self.size = size
        self.top = -1
        self.bits = 0

    def accept(self, pseq: int) -> str | None:
        """Record ``pseq`` and return None if it is new; else why it is refused (``replayed``,
        ``too_old``), the window unchanged."""
        if pseq > self.top:
            shift = pseq - self.top
            self.bits = (((self.bits << shift) | 1) & ((1 << self.size) - 1)
                         if shift < self.size else 1)
            self.top = pseq
            return None
        behind = self.top - pseq
        if behind >= self.size:
            return "too_old"
        bit = 1 << behind
        if self.bits & bit:
            return "replayed"
        self.bits |= bit
        return None


class Sealer:
    """What this peer emits: headers with its next datagram number, and (auth on) its tags.
    Thread-safe: the sending thread and the receiving thread (its STATUS answers) share it."""

    def __init__(self, rank: int, session: Session, auth: bool,
                 first_pseq: int | None = None) -> None:
        self.rank = rank
        self.session_id = session.session_id
        self.mac_id = wire.MAC_BLAKE2B if auth else wire.MAC_NONE
        self._mac = Keyring(session).mac(rank) if auth else None
        start = time.monotonic_ns() // 1000 if first_pseq is None else first_pseq
        self._pseq = start % wire.PSEQ_LIMIT
        self._lock = threading.Lock()

    def _take(self) -> int:
        with self._lock:
            pseq = self._pseq
            self._pseq = (pseq + 1) % wire.PSEQ_LIMIT
        return pseq

    def parts(self, kind: int, round_: int, *tail: int,
              body: bytes | memoryview = b"") -> list[bytes | memoryview]:
        """One datagram as the parts of a gather write: header, body (if any), tag (if auth);
        ``body`` is not copied (a DATA's payload is a view of the vector)."""
        head = wire.header(kind, self.rank, self.session_id, round_, self.mac_id, self._take(),
                           *tail)
        parts: list[bytes | memoryview] = [head, body] if len(body) else [head]
        if self._mac is not None:
            parts.append(tag(self._mac, *parts))
        return parts

    def seal(self, kind: int, round_: int, *tail: int, body: bytes = b"") -> bytes:
        """One whole control datagram (POLL, CLOSE, STATUS)."""
        return b"".join(self.parts(kind, round_, *tail, body=body))


class Gate:
    """What a receiver lets through: a datagram that decodes, carries the run's session id,
    names a peer other than this one whose address is the datagram's source, bears a valid tag
    under that peer's key (auth on; no tag with auth off) and, auth on, was not accepted before.
    Everything else is refused and counted (``malformed``, ``foreign``, ``stranger``,
    ``bad_mac``, ``replayed``, ``too_old``) before anything of the receiver's state is read or
    written; the replay window changes only for a datagram whose tag checked out."""

    def __init__(self, rank: int, addrs: Sequence[Addr], session: Session, auth: bool,
                 replay_window: int, counters: collections.Counter) -> None:
        self.rank = rank
        self.addrs = list(addrs)
        self.session_id = session.session_id
        self.auth = auth
        self.replay_window = replay_window
        self.counters = counters
        self._keys = Keyring(session)
        self._windows: dict[int, ReplayWindow] = {}

    def admit(self, buf: memoryview, src: Addr) -> wire.Datagram | None:
        """The datagram in ``buf`` from ``src`` if it passes every check, else None (counted)."""
        d = wire.decode(buf)
        if d is None:
            self.counters["malformed"] += 1
            return None
        if d.session != self.session_id:
            self.counters["foreign"] += 1
            return None
        if d.sender >= len(self.addrs) or d.sender == self.rank or self.addrs[d.sender] != src:
            self.counters["stranger"] += 1
            return None
        if not self._authentic(d):
            self.counters["bad_mac"] += 1
            return None
        if self.auth:
            window = self._windows.get(d.sender)
            if window is None:
                window = self._windows[d.sender] = ReplayWindow(self.replay_window)
            refused = window.accept(d.pseq)
            if refused is not None:
                self.counters[refused] += 1
                return None
        return d

    def _authentic(self, d: wire.Datagram) -> bool:
        if not self.auth:
            return d.mac == wire.MAC_NONE   # a tag we cannot check is refused, not ignored
        if d.mac != wire.MAC_BLAKE2B:
            return False
        return hmac.compare_digest(tag(self._keys.mac(d.sender), d.signed), d.tag)
