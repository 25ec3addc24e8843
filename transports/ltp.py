"""LTP transport: the Loss-tolerant Transmission Protocol over UDP, driven by the native C core.

Each end owns one UDP socket and one protocol core (:class:`transports.native.Endpoint`); Python
crosses into C once per operation: :meth:`LtpServer.gather` waits for every worker's message in
one call, :meth:`LtpServer.broadcast` sends the parameters to every worker in one call.
Gradients (worker to PS) are loss tolerant: the PS closes a message early once the adaptive
threshold is met, and the missing coordinates are repaired by a Bubble Filling strategy
(:mod:`transports.filling`). Parameters (PS to workers) are reliable by default
(``pull_threshold=1.0``).

Options: most set a field of the core's configuration, and their type, range, default, unit and
help come from the core's option table (``ltp_option`` in ``ltp.h``); the rest (filler, linger,
critical segments, the pull threshold, the test drop hook) are the binding's own.

Addresses are static: the PS is given every worker's (ip, port) and only accepts datagrams from
them; a worker binds exactly the address the PS was given. Every end opens in the transport's
:class:`~transports.session.Session` (the harness hands each host of a run the run's, with the
keys of that host's pairs only): its id is the session id on the wire, and with ``auth`` on every
datagram between two ends is numbered and MAC'd under the key of their pair. Each end
tells its core the exact size of every segment it receives, and the core refuses anything else. The wire format, state machines and
the meaning of every option are in ``docs/ltp-protocol.md``.

    >>> from transports import registry
    >>> t = registry.create("ltp", {"rx_drop_frac": 0.1})
    >>> with t.serve(("127.0.0.1", 7000), workers, layout) as ps: ...
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports import filling, native
from transports.base import (
    Addr,
    Delivery,
    Layout,
    Option,
    OptionError,
    SendReport,
    ServerEnd,
    Session,
    Transport,
    TransportError,
    WorkerEnd,
)

# The binding's names, kept importable from here for existing callers.
from transports.native import (
    LtpError,
    LtpProtocolError,
    LtpSystemError,
    LtpTimeout,
    check,
    library_path,
    stat_names,
)

__all__ = ["LtpError", "LtpProtocolError", "LtpServer", "LtpSystemError", "LtpTimeout",
           "LtpTransport", "LtpWorker", "check", "library_path", "ltp_options", "stat_names"]


# ---------------------------------------------------------------------------- options
# LTP options that set a core field of another name or unit: option -> (field, field units per
# option unit). Every other option built by _core_option sets the field of its own name.
_CORE_FIELD = {"packet_payload_bytes": ("max_udp_payload_bytes", 1),
               "max_wait_ms": ("max_wait_us", 1000)}


def _core_option(name: str, help: str = "") -> Option:
    """An LTP option backed by a core field: the core's table gives type, range, default, unit."""
    field, per = _CORE_FIELD.get(name, (name, 1))
    row = native.core_options()[field]
    numeric = row.kind in ("int", "float")
    kind, low, high, default = row.kind, row.low, row.high, row.default
    if per != 1:   # e.g. milliseconds for a field in microseconds
        kind, low, high, default = "float", low / per, high / per, default / per
    unit = {"us": "ms"}.get(row.unit, row.unit) if per == 1000 else row.unit
    return Option(name, default, kind, low if numeric else None, high if numeric else None,
                  row.choices, unit, help or row.help, native=field)


def _threshold_option(name: str, default: float, help: str) -> Option:
    """An option that becomes an early-close threshold: the core's threshold range and unit."""
    row = native.core_options()["threshold_max"]
    return Option(name, default, "float", row.low, row.high, unit=row.unit, help=help)


@functools.cache
def ltp_options() -> tuple[Option, ...]:
    """LTP's option table (reads the native core's)."""
    return (
        _core_option("threshold_min"), _core_option("threshold_max"),
        _core_option("loss_weight"), _core_option("rtt_weight"),
        _core_option("close_grace_min_us"), _core_option("grace_rtt_mult"),
        _core_option("max_wait_ms"),
        Option("filler", "masked-mean", "choice", choices=filling.FILLERS,
               help="what the PS puts where a gradient did not arrive (Bubble Filling, §7)"),
        _core_option("packet_payload_bytes"), _core_option("udp_gso"),
        _core_option("send_order"), _core_option("peer_schedule"),
        _core_option("cc"), _core_option("fixed_rate_mbps"),
        _core_option("rate_hint"), _core_option("hint_gain"),
        _core_option("cwnd_ack_extra_us"),
        _threshold_option("pull_threshold", 1.0,
                          "fixed early-close threshold of parameters at the workers (1: reliable)"),
        Option("critical_segments", (), "names",
               help="layout segments that must always arrive whole (sent first)"),
        _core_option("ack_every"), _core_option("ack_delay_us"),
        _core_option("max_open_per_peer"), _core_option("auth"), _core_option("mac"),
        Option("linger_ms", 10_000.0, "float", 0.0, 60_000.0, unit="ms",
               help="longest a closing end (PS or worker) waits for its peers to go quiet "
                    "(linger_rtts round trips without a datagram)"),
        Option("rx_drop_frac", 0.0, "float", 0.0, 0.99, unit="fraction",
               help="loopback test hook: drop this seeded fraction of received DATA"),
        _core_option("seed"),
    )


def _to_core(option: Option, value: Any) -> float:
    field, per = _CORE_FIELD.get(option.name, (option.name, 1))
    if per != 1:
        value = round(value * per)
    return native.core_options()[field].to_core(value)


class LtpTransport(Transport):
    """LTP: out-of-order packets, selective ACKs, early close, BBR-like pacing, Bubble Filling."""

    LABEL = "LTP"
    MESH = True

    # Its option table, read from the C core's; a scheme built on the core names its own.
    TABLE = staticmethod(ltp_options)

    @classmethod
    def option_table(cls) -> tuple[Option, ...]:
        return cls.TABLE()

    def receive_thresholds(self) -> tuple[float, float]:
        """The PS's early-close thresholds for gradients (threshold_min, threshold_max)."""
        return self._options["threshold_min"], self._options["threshold_max"]

    def core_settings(self, receive: tuple[float, float],
                      extra: Mapping[str, float] | None = None) -> dict[str, float]:
        """The core configuration (``ltp_config_t`` field -> number) of one end.

        Every option backed by a core field, the thresholds this end receives with, and
        ``extra`` fields the end fixes itself.
        """
        out = {o.native: _to_core(o, self._options[o.name])
               for o in self.option_table() if o.native}
        out.update(threshold_min=receive[0], threshold_max=receive[1], **(extra or {}))
        return out

    def validate(self) -> None:
        # Each option's range was checked against its row; the core judges how they combine.
        problem = native.config_problem(self.core_settings(self.receive_thresholds()))
        if problem:
            for option, (field, _) in _CORE_FIELD.items():   # the core names its fields
                problem = problem.replace(field, option)
            raise OptionError(f"LTP {problem}.")

    def session_settings(self) -> dict[str, float]:
        """The core fields that come from the run's session rather than from options."""
        return {"session_id": self.session.session_id}

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout,
              up: Layout | None = None) -> LtpServer:
        settings = self.core_settings(self.receive_thresholds(),
                                      {"max_msg_bytes": _msg_bytes(layout, up),
                                       **self.session_settings()})
        return LtpServer(self._options, settings, bind, workers, layout, self.session, up)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout,
                up: Layout | None = None) -> LtpWorker:
        pull = self._options["pull_threshold"]
        settings = self.core_settings((pull, pull), {"max_msg_bytes": _msg_bytes(layout, up),
                                                     **self.session_settings()})
        return LtpWorker(self._options, settings, rank, bind, server, layout, self.session, up)

    def mesh(self, rank: int, members: Sequence[Addr], parts: Sequence[Any]):
        """Member ``rank``'s end of a collective (:class:`~transports.ltp_mesh.LtpMesh`).

        Its window of new message ids is the core's widest: a collective's ids are its iteration
        numbers, and two members first paired, or paired again, many iterations apart see ids
        jump legitimately (an older id than one taken is still refused)."""
        from transports.ltp_mesh import LtpMesh   # it builds on this module

        window = int(native.core_options()["rx_msg_window"].high)
        settings = self.core_settings(self.receive_thresholds(),
                                      {"max_msg_bytes": 4 * max(p.n_floats for p in parts),
                                       "rx_msg_window": window, **self.session_settings()})
        return LtpMesh(self._options, settings, rank, members, parts, self.session)


def _msg_bytes(layout: Layout, up: Layout | None = None) -> int:
    return max(4, layout.n_bytes, up.n_bytes if up is not None else 0)


# The messages' machinery lives in ltp_messages; these names stay importable from here.
from transports.ltp_messages import (  # noqa: E402
    _delivery,
    _float32_payload,
    _Messages,
    _segment_fracs,
    _send_report,
    _tiles,
    _WireOrder,
    _end_stats,
)


# ---------------------------------------------------------------------------- the two ends
def _linger(end: native.Endpoint, max_s: float) -> None:
    """Keep ``end`` running until its peers went quiet (``ltp_udp_linger``), ``max_s`` at most.

    Both ends need it: a peer whose last CLOSE copies were all lost keeps probing, and a gone
    end answers nothing, so the peer would wait until its own deadline (a PS in its final
    broadcast, a worker in its final push). The end sends one more CLOSE for each peer's last
    message and leaves once no peer has sent anything for ``linger_rtts`` round trips.
    """
    if end.closed or max_s <= 0:
        return
    try:
        end.linger(max_s)
    except TransportError:
        pass  # closing anyway


class _NativeEnd:
    """What both ends over the native core share (``self.end``, ``self.linger_s``)."""

    def service(self, duration_s: float) -> None:
        """Run the protocol for ``duration_s`` without a request (answers late data, repeats CLOSE)."""
        self.end.service(duration_s)

    def stats(self) -> dict[str, float]:
        return _end_stats(self.end)

    def rejections(self) -> dict[str, float]:
        stats = self.end.stats()
        return {name: stats[name] for name in native.rejection_stats() if name in stats}

    def close(self) -> None:
        """Linger until no peer can need this end (:func:`_linger`), then release it."""
        _linger(self.end, self.linger_s)
        self.end.close()


class LtpServer(_NativeEnd, ServerEnd):
    """The PS end: one socket, one peer slot per worker (slot == rank).

    ``settings`` is the end's core configuration (:meth:`LtpTransport.core_settings`).
    """

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], bind: Addr,
                 workers: Sequence[Addr], layout: Layout, session: Session,
                 up: Layout | None = None) -> None:
        self.layout = layout
        self.up = up or layout   # what the workers push
        self.n_workers = len(workers)
        self.filler = filling.Filler(options["filler"])
        self.linger_s = options["linger_ms"] / 1000.0
        self.net = _Messages(settings, native.rank_server(), bind, layout,
                             options.get("critical_segments", ()), options["rx_drop_frac"],
                             session, self.receives(), recv_layout=up)
        self.end = self.net.end
        # Parts of a gradient (segment, float offset, float count) and what recv_some has taken
        # of a message whose other parts had not closed yet: rank -> (msg_id, values, mask,
        # {part index: its stats}).
        self.parts = getattr(self, "parts", [(0, 0, self.up.n_floats)])
        self._partial: dict[tuple[int, int],
                            tuple[int, np.ndarray, np.ndarray, dict[int, dict]]] = {}
        try:
            for rank, addr in enumerate(workers):
                self.net.add_peer(rank, addr)
        except BaseException:
            self.end.close()
            raise

    def receives(self) -> list[tuple[int, int]]:
        """(segment, float count) of every message this end receives: the whole gradient."""
        return [(0, self.up.n_floats)]

    def wait_for_workers(self, timeout_s: float) -> None:
        self.end.wait_greeted(timeout_s, what=f"waiting for {self.n_workers} workers to say HELLO")

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deliveries = self.net.recv(range(self.n_workers), msg_id, timeout_s)
        return [self.filler.apply(rank, d) for rank, d in enumerate(deliveries)]

    def broadcast(self, msg_id: int, values: np.ndarray, timeout_s: float) -> list[SendReport]:
        return self.net.send(range(self.n_workers), msg_id, values, timeout_s)

    def _decorate(self, delivery: Delivery) -> Delivery:
        """What this transport adds to a gathered message's counters (PLOT: its bounds)."""
        return delivery

    def _held(self, rank: int, msg_id: int) -> tuple[np.ndarray, np.ndarray, dict[int, dict]]:
        held = self._partial.get((rank, msg_id))
        if held is None:
            n = self.up.n_floats
            held = (msg_id, np.zeros(n, dtype=np.float32), np.zeros(n, dtype=np.bool_), {})
            self._partial[(rank, msg_id)] = held
        return held[1], held[2], held[3]

    def recv_some(self, wanted, min_count: int, timeout_s: float) -> dict[int, Delivery]:
        """Whichever workers deliver first (``ltp_udp_recv_some``): a message that closed is
        taken, one that did not stays with the core; a message of several parts (PLOT's layers)
        is handed out once every part closed, the parts taken so far kept here meanwhile."""
        deadline = time.monotonic() + timeout_s
        done: dict[int, Delivery] = {}
        single = len(self.parts) == 1
        while True:
            items, where = [], []
            for rank, ids in wanted.items():
                if rank in done:
                    continue
                for mid in (ids,) if isinstance(ids, int) else ids:
                    values, mask, taken = self._held(rank, mid)
                    for j, (seg, off, cnt) in enumerate(self.parts):
                        if j not in taken:
                            items.append(native.RecvItem(rank, mid, seg, values[off:off + cnt],
                                                         mask[off:off + cnt]))
                            where.append((rank, mid, j))
            need = min_count - len(done)
            if need <= 0 or not items:
                return done
            left = deadline - time.monotonic()
            got = self.end.recv_some(items, need if single else 1, max(left, 1e-6),
                                     what="receiving gradients")
            for (rank, mid, j), stats in zip(where, got):
                if stats is not None:
                    cnt = self.parts[j][2]
                    if stats["total_bytes"] != 4 * cnt:   # the core refuses other shapes
                        raise LtpProtocolError(f"message {mid} from worker {rank} arrived with "
                                               f"{stats['total_bytes']:.0f} bytes, not {4 * cnt}.",
                                               -1)
                    self._partial[(rank, mid)][3][j] = stats
            for rank, mid in sorted({(rank, mid) for rank, mid, _ in where}):
                if rank in done:
                    continue
                _, values, mask, taken = self._partial[(rank, mid)]
                if len(taken) == len(self.parts):
                    for key in [k for k in self._partial if k[0] == rank]:
                        del self._partial[key]
                    if single:
                        values, mask = self.net.recv_wire.from_wire(values, mask)
                    d = _delivery(self.up, values, mask, [taken[j] for j in range(len(taken))],
                                  [seg for seg, _, _ in self.parts])
                    d.stats["msg_id"] = float(mid)
                    done[rank] = self.filler.apply(rank, self._decorate(d))
            if left <= 0:
                return done

    def send_some(self, messages, values: np.ndarray, timeout_s: float) -> dict[int, SendReport]:
        """Send to each named worker its own message id, in one call; a send not finished by the
        deadline is suspended (calling again with the same message resumes it)."""
        ranks = list(messages)
        sent = self.net.send(ranks, [messages[r] for r in ranks], values, timeout_s, partial=True)
        return {r: rep for r, rep in zip(ranks, sent) if rep is not None}

    def average(self, deliveries: Sequence[Delivery]) -> np.ndarray:
        if self.filler.kind == "masked-mean":
            return filling.masked_mean(deliveries)
        return super().average(deliveries)

    def threshold(self, rank: int) -> float:
        """The early-close threshold currently in force for worker ``rank``'s gradients."""
        return self.end.threshold(rank)



class LtpWorker(_NativeEnd, WorkerEnd):
    """A worker's end: one socket with the PS as its only peer."""

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], rank: int,
                 bind: Addr, server: Addr, layout: Layout, session: Session,
                 up: Layout | None = None) -> None:
        ps_rank = native.rank_server()
        if not 0 <= rank < ps_rank:
            raise OptionError(f"an LTP worker rank must be from 0 to {ps_rank - 1}, not {rank}.")
        self.rank = rank
        self.layout = layout
        # A parameter that did not arrive keeps the worker's previous value: zeroing weights
        # would wreck the model, and masked-mean needs several senders. (With the default
        # pull_threshold of 1.0 every parameter arrives anyway.)
        self.filler = filling.Filler("previous")
        self.linger_s = options["linger_ms"] / 1000.0
        self.up = up or layout   # what this worker pushes
        self.net = _Messages(settings, rank, bind, self.up, options.get("critical_segments", ()),
                             options["rx_drop_frac"], session, [(0, layout.n_floats)],
                             recv_layout=layout)
        self.end = self.net.end
        try:
            self.server_peer = self.net.add_peer(ps_rank, server)
        except BaseException:
            self.end.close()
            raise

    def join(self, timeout_s: float) -> None:
        self.end.join(self.server_peer, timeout_s, what=f"worker {self.rank} joining the PS")

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        return self.net.send([self.server_peer], msg_id, values, timeout_s)[0]

    def pull(self, msg_id: int, timeout_s: float) -> Delivery:
        delivery = self.net.recv([self.server_peer], msg_id, timeout_s)[0]
        return self.filler.apply(0, delivery)

