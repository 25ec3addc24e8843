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
:class:`~transports.base.Session` (the harness hands each host of a run the same one): its id is
the session id on the wire, and with ``auth`` on its key keys the MAC of every datagram. Each end
tells its core the exact size of every segment it receives, and the core refuses anything else. The wire format, state machines and
the meaning of every option are in ``docs/ltp-protocol.md``.

    >>> from transports import registry
    >>> t = registry.create("ltp", {"rx_drop_frac": 0.1})
    >>> with t.serve(("127.0.0.1", 7000), workers, layout) as ps: ...
"""

from __future__ import annotations

import functools
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
        _core_option("max_open_per_peer"), _core_option("auth"),
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

    @classmethod
    def option_table(cls) -> tuple[Option, ...]:
        return ltp_options()

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

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout) -> LtpServer:
        settings = self.core_settings(self.receive_thresholds(), {"max_msg_bytes": _msg_bytes(layout),
                                                                  **self.session_settings()})
        return LtpServer(self._options, settings, bind, workers, layout, self.session)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout) -> LtpWorker:
        pull = self._options["pull_threshold"]
        settings = self.core_settings((pull, pull), {"max_msg_bytes": _msg_bytes(layout),
                                                     **self.session_settings()})
        return LtpWorker(self._options, settings, rank, bind, server, layout, self.session)


def _msg_bytes(layout: Layout) -> int:
    return max(4, layout.n_bytes)


# ---------------------------------------------------------------------------- shared machinery
class _WireOrder:
    """Puts critical segments first on the wire, so "critical" is a packet-index prefix."""

    def __init__(self, layout: Layout, critical: Sequence[str]) -> None:
        names = {s.name for s in layout.segments}
        unknown = sorted(set(critical) - names)
        if unknown:
            raise OptionError(f"LTP critical segment {unknown[0]!r} is not in the model layout.")
        crit = [s for s in layout.segments if s.name in set(critical)]
        self.critical_bytes = 4 * sum(s.length for s in crit)
        rest = [s for s in layout.segments if s.name not in set(critical)]
        if crit and crit != list(layout.segments[: len(crit)]):
            self.perm: np.ndarray | None = np.concatenate(
                [np.arange(s.offset, s.offset + s.length) for s in crit + rest])
        else:
            self.perm = None   # already a prefix: no copy needed

    def to_wire(self, values: np.ndarray) -> np.ndarray:
        return values if self.perm is None else values[self.perm]

    def from_wire(self, values: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.perm is None:
            return values, mask
        out_v, out_m = np.empty_like(values), np.empty_like(mask)
        out_v[self.perm], out_m[self.perm] = values, mask
        return out_v, out_m


def _segment_fracs(layout: Layout, mask: np.ndarray | None) -> tuple[float, ...]:
    if mask is None:
        return tuple(1.0 for _ in layout.segments)
    csum = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
    return tuple(float(csum[s.offset + s.length] - csum[s.offset]) / s.length if s.length else 1.0
                 for s in layout.segments)


def _float32_payload(values: np.ndarray, layout: Layout) -> np.ndarray:
    arr = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    if arr.size != layout.n_floats:
        raise TransportError(f"the message has {arr.size} floats but the layout has {layout.n_floats}.")
    return arr


def _send_report(nbytes: int, parts: Sequence[Mapping[str, float]]) -> SendReport:
    """One peer's report, summed over its parts (``ltp_send_stats_t`` each)."""
    last = parts[-1]  # rate and RTT estimates are per peer: any part has the latest
    closed = native.send_done().index("closed")
    stale = native.send_done().index("stale")
    stats = {"acked_packets": sum(s["acked_packets"] for s in parts),
             "count": sum(s["count"] for s in parts),
             "closed_by_peer": float(sum(s["done"] == closed for s in parts)),
             "refused_stale": float(sum(s["done"] == stale for s in parts)),
             "peer_received": sum(s["peer_received"] for s in parts),
             "elapsed_us": max(s["elapsed_us"] for s in parts), "srtt_us": last["srtt_us"],
             "pacing_rate_mbps": last["pacing_rate_mbps"], "btl_bw_mbps": last["btl_bw_mbps"]}
    return SendReport(nbytes, int(sum(s["wire_bytes"] for s in parts)),
                      packets=int(sum(s["packets"] + s["retransmits"] for s in parts)),
                      retransmits=int(sum(s["retransmits"] for s in parts)), stats=stats)


def _delivery(layout: Layout, values: np.ndarray, mask: np.ndarray,
              got: Sequence[Mapping[str, float]], segments: Sequence[int]) -> Delivery:
    """One peer's Delivery from its parts' ``ltp_msg_stats_t``."""
    received = sum(s["received_bytes"] for s in got)
    total = sum(s["total_bytes"] for s in got)
    complete = received == total
    stats = {name: float(sum(s[name] for s in got))
             for name in ("packets", "count", "duplicates", "retransmits", "early_closed",
                          "conflicts")}
    stats.update(critical_packets=float(sum(s["critical_count"] for s in got)),
                 close_reason=max(s["close_reason"] for s in got),
                 elapsed_us=max(s["elapsed_us"] for s in got),
                 pass_us=max(s["pass_us"] for s in got),
                 threshold_frac=min(s["threshold_frac"] for s in got),
                 peer_srtt_us=got[-1]["peer_srtt_us"])
    if len(got) > 1:
        stats.update({f"threshold_{seg}": s["threshold_frac"] for seg, s in zip(segments, got)})
    frac = 1.0 if complete else float(received) / float(total)
    m = None if complete else mask
    return Delivery(values, m, frac, _segment_fracs(layout, m), stats)


def _tiles(parts: Sequence[tuple[int, int, int]], n: int) -> bool:
    """True if the (segment, float offset, float count) parts cover [0, n) without overlap."""
    end = 0
    for _, off, cnt in sorted(parts, key=lambda part: part[1]):
        if off != end:
            return False
        end = off + cnt
    return end == n


def _end_stats(end: native.Endpoint) -> dict[str, float]:
    """An end's counters, and the datagram size and offloads it runs with (none once closed)."""
    stats = end.stats()
    if not end.closed:
        offload = end.offload
        stats.update(datagram_bytes=float(end.datagram_bytes), udp_gso=float(offload["gso"]),
                     udp_gro=float(offload["gro"]))
    return stats


class _Messages:
    """One native endpoint carrying messages of one layout: Deliveries and SendReports.

    ``receives`` is every (segment, float count) this end receives; the core is told each one's
    exact size (segment 0 with the critical span first on the wire) and refuses anything else.
    """

    def __init__(self, settings: Mapping[str, float], rank: int, bind: Addr, layout: Layout,
                 critical: Sequence[str], rx_drop_frac: float, session: Session,
                 receives: Sequence[tuple[int, int]]) -> None:
        self.layout = layout
        self.wire = _WireOrder(layout, critical)
        self.end = native.Endpoint(settings, rank, bind, rx_drop_frac)
        try:
            if settings.get("auth"):
                self.end.set_key(session.key)
            for segment, n_floats in receives:
                self.end.expect(segment, 4 * n_floats, self.wire.critical_bytes if segment == 0 else 0)
        except BaseException:
            self.end.close()
            raise

    def send(self, peers: Sequence[int], msg_id: int, values: np.ndarray,
             timeout_s: float) -> list[SendReport]:
        """Send ``values`` as one message (segment 0) to every peer, in one call into C."""
        payload = self.wire.to_wire(_float32_payload(values, self.layout))
        return self.send_parts(peers, msg_id, [(0, payload)], self.wire.critical_bytes, timeout_s)

    def send_parts(self, peers: Sequence[int], msg_id: int, parts: Sequence[tuple[int, np.ndarray]],
                   critical_bytes: int, timeout_s: float) -> list[SendReport]:
        """Send every (segment, contiguous float32 array) part to every peer, in one call into C.

        Returns one report per peer, summed over its parts.
        """
        items = [native.SendItem(peer, msg_id, seg, arr, critical_bytes)
                 for peer in peers for seg, arr in parts]
        got = self.end.send(items, timeout_s, what=f"sending message {msg_id}")
        per, nbytes = len(parts), sum(arr.nbytes for _, arr in parts)
        return [_send_report(nbytes, got[i * per:(i + 1) * per]) for i in range(len(peers))]

    def recv(self, peers: Sequence[int], msg_id: int, timeout_s: float) -> list[Delivery]:
        """Receive message ``msg_id`` (segment 0) from every peer, in one call into C."""
        return self.recv_parts(peers, msg_id, [(0, 0, self.layout.n_floats)], timeout_s,
                               unwire=True)

    def recv_parts(self, peers: Sequence[int], msg_id: int,
                   parts: Sequence[tuple[int, int, int]], timeout_s: float,
                   unwire: bool = False) -> list[Delivery]:
        """Receive every (segment, float offset, float count) part from every peer, in one call.

        A peer's parts land in one full-length vector and mask; the Delivery's counters are summed
        over the parts, and with several parts each part's close threshold is reported as
        ``threshold_<segment>``. ``unwire`` undoes the critical-first wire order (one part only).
        """
        n = self.layout.n_floats
        # C writes every value and mask byte of each part (zeros where nothing arrived), so parts
        # that tile the vector need no zeroing first: for a 4 MB message that saved a pass over it.
        alloc = np.empty if _tiles(parts, n) else np.zeros
        bufs = [alloc(n, dtype=np.float32) for _ in peers]
        masks = [alloc(n, dtype=np.bool_) for _ in peers]
        items = [native.RecvItem(peer, msg_id, seg, bufs[k][off:off + cnt], masks[k][off:off + cnt])
                 for k, peer in enumerate(peers) for seg, off, cnt in parts]
        got = self.end.recv(items, timeout_s, what=f"receiving message {msg_id}")
        for s, (seg, _, cnt) in zip(got, parts * len(peers)):
            if s["total_bytes"] != 4 * cnt:   # the core refuses other shapes; never deliver one
                raise LtpProtocolError(f"message {msg_id} segment {seg} arrived with "
                                       f"{s['total_bytes']:.0f} bytes, not {4 * cnt}.", -1)
        per, out = len(parts), []
        for k in range(len(peers)):
            values, mask = bufs[k], masks[k]
            if unwire:
                values, mask = self.wire.from_wire(values, mask)
            out.append(_delivery(self.layout, values, mask, got[k * per:(k + 1) * per],
                                 [seg for seg, _, _ in parts]))
        return out

    def close(self) -> None:
        self.end.close()


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


class LtpServer(ServerEnd):
    """The PS end: one socket, one peer slot per worker (slot == rank).

    ``settings`` is the end's core configuration (:meth:`LtpTransport.core_settings`).
    """

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], bind: Addr,
                 workers: Sequence[Addr], layout: Layout, session: Session) -> None:
        self.layout = layout
        self.n_workers = len(workers)
        self.filler = filling.Filler(options["filler"])
        self.linger_s = options["linger_ms"] / 1000.0
        self.net = _Messages(settings, native.rank_server(), bind, layout,
                             options.get("critical_segments", ()), options["rx_drop_frac"],
                             session, self.receives())
        self.end = self.net.end
        try:
            for rank, addr in enumerate(workers):
                self.end.add_peer(rank, addr)
        except BaseException:
            self.end.close()
            raise

    def receives(self) -> list[tuple[int, int]]:
        """(segment, float count) of every message this end receives: the whole gradient."""
        return [(0, self.layout.n_floats)]

    def wait_for_workers(self, timeout_s: float) -> None:
        self.end.wait_greeted(timeout_s, what=f"waiting for {self.n_workers} workers to say HELLO")

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deliveries = self.net.recv(range(self.n_workers), msg_id, timeout_s)
        return [self.filler.apply(rank, d) for rank, d in enumerate(deliveries)]

    def broadcast(self, msg_id: int, values: np.ndarray, timeout_s: float) -> list[SendReport]:
        return self.net.send(range(self.n_workers), msg_id, values, timeout_s)

    def average(self, deliveries: Sequence[Delivery]) -> np.ndarray:
        if self.filler.kind == "masked-mean":
            return filling.masked_mean(deliveries)
        return super().average(deliveries)

    def threshold(self, rank: int) -> float:
        """The early-close threshold currently in force for worker ``rank``'s gradients."""
        return self.end.threshold(rank)

    def service(self, duration_s: float) -> None:
        """Run the protocol for ``duration_s`` without a request (answers late data, repeats CLOSE)."""
        self.end.service(duration_s)

    def stats(self) -> dict[str, float]:
        return _end_stats(self.end)

    def rejections(self) -> dict[str, float]:
        stats = self.end.stats()
        return {name: stats[name] for name in native.rejection_stats() if name in stats}

    def close(self) -> None:
        """Linger until no worker can need this end (:func:`_linger`), then release it."""
        _linger(self.end, self.linger_s)
        self.end.close()


class LtpWorker(WorkerEnd):
    """A worker's end: one socket with the PS as its only peer."""

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], rank: int,
                 bind: Addr, server: Addr, layout: Layout, session: Session) -> None:
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
        self.net = _Messages(settings, rank, bind, layout, options.get("critical_segments", ()),
                             options["rx_drop_frac"], session, [(0, layout.n_floats)])
        self.end = self.net.end
        try:
            self.server_peer = self.end.add_peer(ps_rank, server)
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

    def service(self, duration_s: float) -> None:
        """Run the protocol for ``duration_s`` without a request (answers late data, repeats CLOSE)."""
        self.end.service(duration_s)

    def stats(self) -> dict[str, float]:
        return _end_stats(self.end)

    def rejections(self) -> dict[str, float]:
        stats = self.end.stats()
        return {name: stats[name] for name in native.rejection_stats() if name in stats}

    def close(self) -> None:
        """Linger until the PS cannot need this end (:func:`_linger`), then release it."""
        _linger(self.end, self.linger_s)
        self.end.close()
