"""The contract of a peer-to-peer transport: every peer sends to some peers and receives from some.

In peer-to-peer training there is no parameter server. Each of N peers (rank 0..N-1, one per
emulated host) trains, then once per round sends its flat float32 parameter vector to the
receivers the SDN controller chose for it, and mixes whatever it received from the others. One
:class:`PeerEnd` per peer does both halves:

- :meth:`PeerEnd.send` sends one round's vector to a list of receivers and blocks until each of
  them has confirmed (taken the message completely, or closed it early with part of it) or the
  timeout passes; the :class:`SendReport` says what it cost and what each receiver ended with.
  With ``group`` the sender emits one copy to a multicast address and the switches replicate it
  (rewriting the destination to each receiver's own address on the last hop); without, it sends
  one unicast copy per receiver.
- A background thread receives the others' messages the whole time (also while this peer is
  sending) and answers their senders; :meth:`PeerEnd.take` hands out the messages closed since
  the last call as :class:`Incoming` values, whose ``mask`` says which coordinates arrived.

Addresses: peer ``r`` is ``(ips[r], port)``. Group mode needs every receiver on the same port,
since the switch rewrites only the IP and MAC. Loopback tests put all peers on 127.0.0.1 and give
each its own port with the keyword ``ports`` (one per rank), which overrides ``port``.

Nothing that arrives is trusted: a datagram or stream of another session, of the wrong length,
from an address that is not the peer's it claims to be, or with a sequence, rank or round out of
range is dropped and counted in :meth:`PeerEnd.stats`; the receiving thread never raises. The
multicast transport also authenticates every datagram (its ``auth`` option, on by default: a MAC
under a key derived from the :class:`~transports.base.Session` key, and a replay window); the
TCP baseline relies on TCP's own handshake and sequence numbers.

The peer transports are named by :data:`transports.peer.SCHEMES`, not by
:mod:`transports.registry` (that registry is the parameter-server contract of
:mod:`transports.base`). Options are declared as :class:`~transports.base.Option` rows and
checked with :func:`transports.base.check_options`, as the PS's transports' are.
"""

from __future__ import annotations

import abc
import dataclasses
import ipaddress
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.base import Addr, End, Option, Session, check_options

MAX_PEERS = 65535   # ranks travel as 16-bit numbers


@dataclasses.dataclass(frozen=True)
class Incoming:
    """A message a peer received and closed.

    ``values`` is float32 of length ``n_floats``; coordinates that did not arrive are 0 and False
    in ``mask`` (``mask`` is None when all arrived). ``early`` says it was closed before it was
    complete (the receiver's ``close_frac`` was reached, the sender closed the round, or a newer
    round from the same sender arrived).
    """

    sender: int
    round: int
    values: np.ndarray
    mask: np.ndarray | None
    received_frac: float
    early: bool


@dataclasses.dataclass(frozen=True)
class SendReport:
    """What sending one round to a set of receivers cost this peer and what they ended with.

    ``packets`` and ``wire_bytes`` count what this peer emitted for the round (data, repairs and
    control; each transport's docstring says how headers are counted); ``retransmits`` the data
    datagrams (or TCP segments) sent again. ``delivered`` maps each receiver that confirmed to the
    fraction of the vector it delivered when it closed (0.0 if it had too little and dropped
    the message); ``unfinished`` lists the receivers that had not confirmed at the timeout.
    """

    seconds: float
    packets: int
    retransmits: int
    wire_bytes: int
    delivered: dict[int, float]
    unfinished: tuple[int, ...]


class PeerEnd(End):
    """One peer's end of a peer-to-peer job; a context manager.

    Subclasses implement :meth:`send`, :meth:`stats` and :meth:`_shut`, start their receiving
    thread in ``__init__`` (it runs until ``_stop`` is set) and hand each closed message to
    :meth:`_deliver`.
    """

    SLUG = ""
    OPTIONS: Sequence[Option] = ()

    def __init__(self, rank: int, ips: Sequence[str], port: int, n_floats: int,
                 session: Session, options: Mapping[str, Any] | None = None, *,
                 ports: Sequence[int] | None = None) -> None:
        if not 1 <= len(ips) <= MAX_PEERS:
            raise ValueError(f"a peer job has 1 to {MAX_PEERS} peers, not {len(ips)}.")
        if not (isinstance(rank, (int, np.integer)) and 0 <= rank < len(ips)):
            raise ValueError(f"rank must be a peer's index from 0 to {len(ips) - 1}, not {rank!r}.")
        rank = int(rank)
        if ports is not None and len(ports) != len(ips):
            raise ValueError(f"give one port per peer ({len(ips)}), not {len(ports)}.")
        if not (isinstance(n_floats, (int, np.integer)) and n_floats >= 1):
            raise ValueError(f"n_floats must be a positive integer, not {n_floats!r}.")
        n_floats = int(n_floats)
        if not isinstance(session, Session):
            raise ValueError("session must be a transports.base.Session; draw one per run.")
        for ip in ips:
            ipaddress.IPv4Address(ip)   # raises ValueError naming the bad address
        self.rank = rank
        self.addrs: list[Addr] = [(ip, int(ports[i] if ports is not None else port))
                                  for i, ip in enumerate(ips)]
        self.n_peers = len(ips)
        self.n_floats = n_floats
        self.session = session
        self.options = check_options(self.OPTIONS, options, self.SLUG or type(self).__name__,
                                     what="peer transport")
        self._incoming: list[Incoming] = []
        self._incoming_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False

    # --- what a caller uses ---------------------------------------------------------------

    @abc.abstractmethod
    def send(self, round_: int, values: np.ndarray, receivers: Sequence[int], *,
             group: str | None = None, rate_mbps: float = 100.0,
             timeout_s: float = 30.0) -> SendReport:
        """Send ``values`` as this peer's round ``round_`` to ``receivers`` (ranks) and block until
        each has confirmed or ``timeout_s`` passed. ``group``: a multicast address the network
        replicates to the receivers (None: one unicast copy per receiver). Data is paced at
        ``rate_mbps`` in total."""

    def take(self) -> list[Incoming]:
        """The messages closed since the last call, in the order they closed (thread-safe)."""
        with self._incoming_lock:
            got, self._incoming = self._incoming, []
        return got

    @abc.abstractmethod
    def stats(self) -> dict[str, float]:
        """Cumulative counters of this end (datagrams in and out, dropped by reason, ...)."""

    def close(self) -> None:
        """Stop the receiving thread and release the sockets. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._shut()

    @abc.abstractmethod
    def _shut(self) -> None:
        """Once ``_stop`` is set: wait for this end's threads and close its sockets."""

    # --- for subclasses -------------------------------------------------------------------

    def _deliver(self, message: Incoming) -> None:
        with self._incoming_lock:
            self._incoming.append(message)

    def _check_send(self, round_: int, values: np.ndarray, receivers: Sequence[int],
                    group: str | None, rate_mbps: float, timeout_s: float) -> list[int]:
        """Validate :meth:`send`'s arguments; the receivers as a list of distinct ranks."""
        if not (isinstance(round_, (int, np.integer)) and 0 <= round_ < 2**32):
            raise ValueError(f"a round is a 32-bit unsigned number, not {round_!r}.")
        if not (isinstance(values, np.ndarray) and values.dtype == np.float32
                and values.shape == (self.n_floats,)):
            raise ValueError(f"values must be a float32 vector of {self.n_floats} floats.")
        ranks = [int(r) for r in receivers]
        if len(set(ranks)) != len(ranks) or any(not 0 <= r < self.n_peers or r == self.rank
                                                for r in ranks):
            raise ValueError(f"receivers must be distinct ranks of other peers (0 to "
                             f"{self.n_peers - 1}, not {self.rank}), not {list(receivers)!r}.")
        if group is not None:
            if not ipaddress.IPv4Address(group).is_multicast:
                raise ValueError(f"group must be an IPv4 multicast address, not {group!r}.")
            if len({self.addrs[r][1] for r in ranks}) > 1:
                raise ValueError("group mode needs every receiver on the same port; the switch "
                                 "rewrites only the address.")
        if not rate_mbps > 0 or not timeout_s > 0:
            raise ValueError("rate_mbps and timeout_s must be above 0.")
        return ranks
