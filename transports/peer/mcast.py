"""The multicast peer transport: UDP, loss-tolerant, NACK-based repair, early close per receiver.

Slug ``mcast``. One round of one sender, as we interpret issue 15's "multicast-capable
transport" (see ``docs/peer-transports.md``):

1. **First pass.** The vector is cut into DATA datagrams of ``payload_bytes`` (1400 by default:
   with the 28-byte header, the 16-byte tag and IP+UDP it fits a 1500-byte MTU) and sent paced
   at ``rate_mbps``, IP and UDP headers counted: once each to the group address (group mode;
   the switches copy it to every selected receiver and rewrite the destination on the last
   hop), or to each receiver in turn (unicast copies; the pace is for the total emitted).
2. **Poll.** The sender sends POLL(round, pass) every ``poll_ms`` (to the group, or to each
   receiver not yet closed) until every open receiver has answered for this pass, or some have
   and four poll intervals have passed since the first answer (a receiver that is gone must not
   stall the repair of the others). Each receiver answers STATUS, unicast to the sender: closed,
   or a bitmap of the datagrams it holds. At the POLL a receiver closes if it holds at least
   ``close_frac`` of the coordinates (1.0, the default, is reliable delivery).
3. **Repair.** The sender retransmits the union of the datagrams still missing at the open
   receivers (group mode: once, to the group) or each open receiver's own missing datagrams to it
   (copies mode), paced the same, and polls again.
4. **Close.** Once every receiver closed, ``send`` returns. If some are still open
   ``max_wait_ms`` after the first pass ended, the sender sends CLOSE(round) every ``poll_ms``
   to them; each closes with what it holds (delivered if at least ``min_frac``, else dropped) and
   confirms with a closed STATUS. ``timeout_s`` bounds the whole call; receivers that never
   confirmed are ``unfinished``.

The receiving half is :class:`~transports.peer.inbound.Inbound` (what a receiver does with DATA,
POLL and CLOSE, and when an older round is superseded) and
:class:`~transports.peer.outbound.Outbound` (what a sender does with STATUS); the datagrams are
:mod:`transports.peer.wire`. Everything travels over ONE UDP socket bound to the peer's own
address and port: the sending thread writes DATA, POLL and CLOSE; a background thread reads every
datagram (``select`` with a 0.1 s tick, then drains without blocking), handles DATA/POLL/CLOSE as a
receiver, answers STATUS, and hands STATUS about this peer's own round to the sending thread
through a :class:`threading.Condition`.

Trust (:mod:`transports.peer.auth`): with ``auth`` on (the default) every datagram ends in a
BLAKE2b tag under its sender's key, derived from the run's :class:`~transports.base.Session`
key, and carries the sender's datagram number. Every datagram read passes the
:class:`~transports.peer.auth.Gate` before anything else sees it: it must decode, carry this
run's session id, name a rank whose address is the datagram's source, bear a valid tag (checked
in constant time) and not be a replay; then :class:`Inbound` refuses rounds outside its round
window and sequences or counts out of range. Everything refused is counted by reason. With
``auth`` off there is no tag and no replay window: the session id filters strays from other
runs but is no authentication. ``docs/peer-transports.md`` has the threat model.

Counting: ``packets`` and ``wire_bytes`` of a :class:`~transports.peer.base.SendReport` are every
datagram this peer emitted for the round (DATA first pass, repairs, POLL, CLOSE; in copies mode
each copy counts), bytes including 28 bytes of IP+UDP headers and the tags; ``retransmits`` the
repair DATA datagrams. Python, not the C core: the C core's state machine is point-to-point per
peer pair.
"""

from __future__ import annotations

import collections
import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.base import Option, OptionError, Session, check_order
from transports.peer import wire
from transports.peer.auth import Gate, Sealer
from transports.peer.base import PeerEnd, SendReport
from transports.peer.inbound import ROUND_WINDOW, DropHook, Inbound, datagram_count
from transports.peer.outbound import Outbound, well_formed

TICK_S = 0.1               # the receiving thread looks at its stop flag this often
FIRST_ANSWER_POLLS = 4     # after the first STATUS of a pass, wait this many polls for the rest
PACE_SLACK_S = 0.001       # sleep only when ahead of the pace by more than this
STATS_KEYS = ("datagrams_in", "bytes_in", "datagrams_out", "bytes_out", "retransmits",
              "status_out", "delivered", "early_closes", "malformed", "foreign", "stranger",
              "bad_mac", "replayed", "too_old", "out_of_window",
              "stale", "late", "duplicate_data", "superseded", "dropped_below_min",
              "test_dropped", "send_errors", "recv_errors", "handler_errors")
REJECTIONS = ("malformed", "foreign", "stranger", "bad_mac", "replayed", "too_old",
              "out_of_window")   # 0 at a peer that hears only its run's peers (bar reordering)


class _Pacer:
    """Spaces datagrams so that bytes on the wire (IP+UDP counted) leave at ``rate_mbps``."""

    def __init__(self, rate_mbps: float) -> None:
        self.s_per_byte = 8 / (rate_mbps * 1e6)
        self.due = time.monotonic()

    def wait(self, wire_bytes: int) -> None:
        now = time.monotonic()
        self.due = max(self.due, now - PACE_SLACK_S) + wire_bytes * self.s_per_byte
        ahead_s = self.due - now
        if ahead_s > PACE_SLACK_S:
            time.sleep(ahead_s)


class McastPeer(PeerEnd):
    """One peer of the multicast transport (see the module docstring)."""

    SLUG = "mcast"
    OPTIONS = (
        Option("close_frac", 1.0, "float", 0.01, 1.0,
               help="a receiver closes a message at a poll once it holds this fraction "
                    "(1.0: reliable)"),
        Option("min_frac", 0.5, "float", 0.0, 1.0,
               help="at the sender's CLOSE a receiver delivers what it holds if at least this "
                    "fraction, else drops it"),
        Option("poll_ms", 5.0, "float", 0.5, 1000.0, unit="ms",
               help="interval between the sender's polls (and CLOSEs) while it waits for answers"),
        Option("max_wait_ms", 2000.0, "float", 0.0, 600000.0, unit="ms",
               help="how long after the first pass the sender repairs before it sends CLOSE"),
        Option("payload_bytes", 1400, "int", 4, wire.MAX_PAYLOAD_BYTES, unit="bytes",
               help="float32 payload per DATA datagram (a multiple of 4; 1400 fits a 1500 MTU)"),
        Option("auth", True, "bool",
               help="tag every datagram with a BLAKE2b MAC under its sender's key (derived from "
                    "the run's key) and refuse replays"),
        Option("replay_window", 4096, "int", 64, 1 << 20, unit="datagrams",
               help="with auth: how far behind a sender's newest datagram number one may arrive "
                    "and still be accepted (once)"),
        Option("round_window", ROUND_WINDOW, "int", 1, 1 << 24, unit="rounds",
               help="a receiver refuses a round more than this past the newest round it has "
                    "sent or accepted"),
        Option("rcvbuf_bytes", 4 << 20, "int", 65536, 1 << 30, unit="bytes",
               help="receive buffer asked for the socket (the kernel caps it at rmem_max)"),
    )

    def __init__(self, rank: int, ips: Sequence[str], port: int, n_floats: int,
                 session: Session, options: Mapping[str, Any] | None = None, *,
                 ports: Sequence[int] | None = None, drop: DropHook | None = None) -> None:
        """``drop`` is a test hook: see :data:`~transports.peer.inbound.DropHook`."""
        super().__init__(rank, ips, port, n_floats, session, options, ports=ports)
        o = self.options
        if o["payload_bytes"] % 4:
            raise OptionError(f"mcast option payload_bytes must be a multiple of 4, "
                              f"not {o['payload_bytes']}.")
        check_order("mcast option", o, "min_frac", "close_frac")
        self.count = datagram_count(n_floats, o["payload_bytes"])
        if self.count > wire.MAX_COUNT:
            raise ValueError(f"a message of {n_floats} floats needs {self.count} datagrams; "
                             f"mcast carries at most {wire.MAX_COUNT}, so raise payload_bytes.")
        self._rx: collections.Counter = collections.Counter()   # written by the thread only
        self._tx: collections.Counter = collections.Counter()   # written by send() only
        self._sealer = Sealer(rank, session, o["auth"])
        self._gate = Gate(rank, self.addrs, session, o["auth"], o["replay_window"], self._rx)
        self._inbound = Inbound(rank, n_floats, o["payload_bytes"], self._sealer.seal,
                                o["close_frac"], o["min_frac"], self._deliver, self._rx, drop,
                                round_window=o["round_window"])
        self._cond = threading.Condition()
        self._out: Outbound | None = None
        self._send_lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, o["rcvbuf_bytes"])
            self._sock.bind(self.addrs[rank])
        except OSError:
            self._sock.close()
            raise
        self._mcast_ready = False
        self._thread = threading.Thread(target=self._receive_loop, daemon=True,
                                        name=f"mcast-peer-{rank}")
        self._thread.start()

    # --- sending -----------------------------------------------------------------------------

    def send(self, round_: int, values: np.ndarray, receivers: Sequence[int], *,
             group: str | None = None, rate_mbps: float = 100.0,
             timeout_s: float = 30.0) -> SendReport:
        ranks = self._check_send(round_, values, receivers, group, rate_mbps, timeout_s)
        with self._send_lock:   # one round at a time: the STATUS answers name only the round
            return self._send(int(round_), values, ranks, group, rate_mbps, timeout_s)

    def _send(self, round_: int, values: np.ndarray, ranks: list[int], group: str | None,
              rate_mbps: float, timeout_s: float) -> SendReport:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        before = collections.Counter(self._tx)
        if group is not None:
            self._use_multicast()
        out = Outbound(round_, ranks)
        with self._cond:
            self._out = out
        self._inbound.own_round = max(self._inbound.own_round, round_)
        pacer = _Pacer(rate_mbps)
        payload = memoryview(np.ascontiguousarray(values)).cast("B")
        try:
            self._data(round_, payload, range(self.count), ranks, group, pacer, deadline)
            repair_until = time.monotonic() + self.options["max_wait_ms"] / 1000
            while out.open() and time.monotonic() < min(repair_until, deadline):
                missing = self._poll(out, group, min(repair_until, deadline))
                if missing:
                    self._tx["retransmits"] += self._repair(round_, payload, missing, group,
                                                            pacer, deadline)
            if out.open():
                self._close_round(out, group, deadline)
        finally:
            with self._cond:
                self._out = None
        tx = self._tx - before
        return SendReport(seconds=time.monotonic() - t0, packets=tx["datagrams_out"],
                          retransmits=tx["retransmits"], wire_bytes=tx["bytes_out"],
                          delivered=dict(out.closed), unfinished=tuple(out.open()))

    def _use_multicast(self) -> None:
        """Name the outgoing interface by our own address, so the host needs no multicast
        route, and do not loop our own datagrams back to us."""
        if self._mcast_ready:
            return
        ip = self.addrs[self.rank][0]
        self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
        self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
        self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 4)
        self._mcast_ready = True

    def _emit(self, parts: list, dest: tuple[str, int]) -> None:
        size = sum(len(p) for p in parts)
        try:
            self._sock.sendmsg(parts, [], 0, dest)
        except OSError:   # e.g. no route: the datagram is lost, the repair loop copes
            self._tx["send_errors"] += 1
            return
        self._tx["datagrams_out"] += 1
        self._tx["bytes_out"] += size + wire.IP_UDP_BYTES

    def _dests(self, ranks: Sequence[int], group: str | None) -> list[tuple[str, int]]:
        if group is not None:
            return [(group, self.addrs[ranks[0]][1])] if ranks else []
        return [self.addrs[r] for r in ranks]

    def _data(self, round_: int, payload: memoryview, seqs: Sequence[int], ranks: Sequence[int],
              group: str | None, pacer: _Pacer, deadline: float) -> int:
        """Send DATA ``seqs`` to the group or to each of ``ranks``; the datagrams emitted."""
        size, sent = self.options["payload_bytes"], 0
        dests = self._dests(ranks, group)
        for seq in seqs:
            if time.monotonic() >= deadline:
                break
            # One datagram number and tag for every copy: each receiver sees it once.
            parts = self._sealer.parts(wire.DATA, round_, seq, self.count,
                                       body=payload[seq * size:(seq + 1) * size])
            wire_bytes = sum(len(p) for p in parts) + wire.IP_UDP_BYTES
            for dest in dests:
                pacer.wait(wire_bytes)
                self._emit(parts, dest)
                sent += 1
        return sent

    def _repair(self, round_: int, payload: memoryview, missing: dict[int, np.ndarray],
                group: str | None, pacer: _Pacer, deadline: float) -> int:
        """Retransmit what the open receivers miss; the datagrams emitted."""
        if group is not None:
            union = np.logical_or.reduce(list(missing.values()))
            return self._data(round_, payload, np.flatnonzero(union).tolist(), list(missing),
                              group, pacer, deadline)
        return sum(self._data(round_, payload, np.flatnonzero(m).tolist(), [r], None, pacer,
                              deadline) for r, m in missing.items())

    def _poll(self, out: Outbound, group: str | None, until: float) -> dict[int, np.ndarray]:
        """One pass of polls; the missing datagrams of each open receiver that answered."""
        poll_s = self.options["poll_ms"] / 1000
        with self._cond:
            out.pass_ = (out.pass_ + 1) & 0xFFFF
            out.answered.clear()
            out.first_answer = None
        while True:
            with self._cond:
                waiting = [r for r in out.open() if r not in out.answered]
            if not waiting:
                break
            now = time.monotonic()
            if now >= until or (out.first_answer is not None
                                and now - out.first_answer >= FIRST_ANSWER_POLLS * poll_s):
                break
            # A fresh datagram number every time: a receiver refuses a repeated one as a replay.
            poll = self._sealer.seal(wire.POLL, out.round, out.pass_, self.count)
            for dest in self._dests(waiting, group):
                self._emit([poll], dest)
            with self._cond:
                self._cond.wait_for(lambda: all(r in out.answered or r in out.closed
                                                for r in waiting),
                                    timeout=max(0.0, min(poll_s, until - time.monotonic())))
        with self._cond:
            return {r: m for r, m in out.answered.items() if r not in out.closed and m.any()}

    def _close_round(self, out: Outbound, group: str | None, deadline: float) -> None:
        """Send CLOSE until every open receiver confirmed or the deadline."""
        poll_s = self.options["poll_ms"] / 1000
        while True:
            with self._cond:
                waiting = out.open()
            if not waiting or time.monotonic() >= deadline:
                return
            close = self._sealer.seal(wire.CLOSE, out.round, self.count)   # a fresh number
            for dest in self._dests(waiting, group):
                self._emit([close], dest)
            with self._cond:
                self._cond.wait_for(lambda: not out.open(),
                                    timeout=max(0.0, min(poll_s, deadline - time.monotonic())))

    # --- receiving (the background thread) ---------------------------------------------------

    def _receive_loop(self) -> None:
        buf = bytearray(65536)
        view = memoryview(buf)
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._sock], [], [], TICK_S)
            except (OSError, ValueError):   # the socket was closed under us
                return
            while ready:
                try:
                    n, src = self._sock.recvfrom_into(buf, 0, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError:
                    self._rx["recv_errors"] += 1
                    break
                try:
                    self._handle(view[:n], src)
                except Exception:   # never let a datagram kill the thread; tests assert 0
                    self._rx["handler_errors"] += 1

    def _handle(self, buf: memoryview, src: tuple[str, int]) -> None:
        self._rx["datagrams_in"] += 1
        self._rx["bytes_in"] += len(buf) + wire.IP_UDP_BYTES
        d = self._gate.admit(buf, src)   # before anything reads or writes state
        if d is None:
            return
        if d.kind == wire.STATUS:   # about this peer's own sends
            self._on_status(d)
        else:
            self._answer(self._inbound.on_datagram(d), src)

    def _answer(self, status: bytes | None, src: tuple[str, int]) -> None:
        if status is None:
            return
        try:
            self._sock.sendto(status, src)
        except OSError:
            self._rx["send_errors"] += 1
            return
        self._rx["status_out"] += 1
        self._rx["status_bytes_out"] += len(status) + wire.IP_UDP_BYTES

    def _on_status(self, d: wire.Datagram) -> None:
        """A receiver's report on our round: record it and wake the sending thread."""
        with self._cond:
            out = self._out
            if out is None:
                well = well_formed(d, self.rank, self.count, self.n_floats)
                self._rx["stale" if well else "malformed"] += 1
                return
            if out.on_status(d, self.rank, self.count, self.n_floats, self._rx):
                self._cond.notify_all()

    # --- the rest of the contract ------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """Counters, every one of :data:`STATS_KEYS` (bytes with IP+UDP headers): datagrams and
        bytes in and out (STATUS answers included), dropped by reason (``malformed``,
        ``foreign`` session, ``stranger`` source, ``bad_mac``, ``replayed``/``too_old``
        datagram number, ``out_of_window``/``stale``/``late`` round, ``superseded``,
        ``dropped_below_min``, ``test_dropped``), ``delivered``, ``early_closes``,
        ``retransmits``, ``status_out``, errors."""
        rx, tx = dict(self._rx), dict(self._tx)
        merged = dict.fromkeys(STATS_KEYS, 0.0)
        for k, v in [*rx.items(), *tx.items()]:
            if k in merged:
                merged[k] += v
        merged["datagrams_out"] += rx.get("status_out", 0)
        merged["bytes_out"] += rx.get("status_bytes_out", 0)
        return merged

    def rejections(self) -> dict[str, float]:
        """The counters of datagrams refused as not from this run's peers or not what they send
        (forged, replayed, corrupt, stray): :data:`REJECTIONS`."""
        stats = self.stats()
        return {k: stats[k] for k in REJECTIONS}

    def _shut(self) -> None:
        self._thread.join(timeout=2 * TICK_S + 1.0)
        self._sock.close()
