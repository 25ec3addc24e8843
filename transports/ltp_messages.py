"""LTP's messages over one native endpoint: the wire order, Deliveries and SendReports.

The machinery :mod:`transports.ltp`'s two ends (and PLOT's) share: :class:`_Messages` sends
and receives whole messages or their parts in one call into C each and turns the core's
per-message counters into :class:`~transports.base.Delivery` and
:class:`~transports.base.SendReport`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from transports import native
from transports.base import (SERVER, Addr, Delivery, Layout, OptionError, SendReport, Session,
                             TransportError)
from transports.native import LtpProtocolError


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
             "pacing_rate_mbps": last["pacing_rate_mbps"], "btl_bw_mbps": last["btl_bw_mbps"],
             "wait_us": min(s["wait_us"] for s in parts),
             "first_pass_us": max(s["first_pass_us"] for s in parts),
             "max_gap_us": max(s["max_gap_us"] for s in parts),
             "probes": sum(s["probes"] for s in parts)}
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


def _party(rank: int) -> int:
    """The session party of an LTP wire rank: the server's rank is the PS's party."""
    return SERVER if rank == native.rank_server() else rank


def _end_stats(end: native.Endpoint) -> dict[str, float]:
    """An end's counters, and the datagram size and offloads it runs with (none once closed)."""
    stats = end.stats()
    if not end.closed:
        offload = end.offload
        stats.update(datagram_bytes=float(end.datagram_bytes), udp_gso=float(offload["gso"]),
                     udp_gro=float(offload["gro"]))
    return stats


class _Messages:
    """One native endpoint sending messages of one layout and receiving messages of another
    (the same unless workers compress their pushes): Deliveries and SendReports.

    ``layout`` is what this end sends, ``recv_layout`` what it receives (None: the same), both
    with the ``critical`` segments first on the wire. ``receives`` is every (segment, float
    count) this end receives; the core is told each one's exact size (segment 0 with the
    critical span first on the wire) and refuses anything else. Peers are added with
    :meth:`add_peer`, which (auth on) gives each the key of its pair from ``session``.
    """

    def __init__(self, settings: Mapping[str, float], rank: int, bind: Addr, layout: Layout,
                 critical: Sequence[str], rx_drop_frac: float, session: Session,
                 receives: Sequence[tuple[int, int]], recv_layout: Layout | None = None) -> None:
        self.layout = layout
        self.wire = _WireOrder(layout, critical)
        self.recv_layout = recv_layout or layout
        self.recv_wire = self.wire if recv_layout is None else _WireOrder(recv_layout, critical)
        self.end = native.Endpoint(settings, rank, bind, rx_drop_frac)
        self.rank, self.session, self.auth = rank, session, bool(settings.get("auth"))
        try:
            for segment, n_floats in receives:
                self.end.expect(segment, 4 * n_floats,
                                self.recv_wire.critical_bytes if segment == 0 else 0)
        except BaseException:
            self.end.close()
            raise

    def add_peer(self, rank: int, addr: Addr) -> int:
        """Peer ``rank`` at ``addr``, keyed (auth on) with the key of the pair this end and it
        form; returns its slot. A rank on the wire is its host's party in the session
        (:mod:`transports.session`): LTP's server rank is :data:`~transports.session.SERVER`."""
        slot = self.end.add_peer(rank, addr)
        if self.auth:
            self.end.set_peer_key(slot, self.session.pair_key(_party(self.rank), _party(rank)))
        return slot

    def send(self, peers: Sequence[int], msg_id: int | Sequence[int], values: np.ndarray,
             timeout_s: float, partial: bool = False) -> list[SendReport | None]:
        """Send ``values`` as one message (segment 0) to every peer, in one call into C.

        ``msg_id`` is one id for every peer, or one per peer. With ``partial`` a peer whose send
        did not finish by the deadline gets None (its send suspended: sending it again resumes it)
        instead of an error.
        """
        payload = self.wire.to_wire(_float32_payload(values, self.layout))
        return self.send_parts(peers, msg_id, [(0, payload)], self.wire.critical_bytes, timeout_s,
                               partial)

    def send_parts(self, peers: Sequence[int], msg_id: int | Sequence[int],
                   parts: Sequence[tuple[int, np.ndarray]], critical_bytes: int,
                   timeout_s: float, partial: bool = False,
                   marks: Sequence[int] | None = None) -> list[SendReport | None]:
        """Send every (segment, contiguous float32 array) part to every peer, in one call into C.

        ``marks`` gives each part's DATA an IP TOS byte (:func:`transports.native.tos_mark` of
        it, or 0 for the socket's), in the order of ``parts``. Returns one report per peer,
        summed over its parts (None for a peer not finished by the deadline, with ``partial``).
        """
        ids = [msg_id] * len(peers) if isinstance(msg_id, int) else list(msg_id)
        marks = list(marks) if marks is not None else [0] * len(parts)
        items = [native.SendItem(peer, mid, seg, arr, critical_bytes, mark)
                 for peer, mid in zip(peers, ids) for (seg, arr), mark in zip(parts, marks)]
        got = self.end.send(items, timeout_s, what=f"sending message {ids[0] if ids else 0}",
                            partial=partial)
        per, nbytes = len(parts), sum(arr.nbytes for _, arr in parts)
        out = []
        for i in range(len(peers)):
            mine = got[i * per:(i + 1) * per]
            out.append(None if any(g is None for g in mine) else _send_report(nbytes, mine))
        return out

    def recv(self, peers: Sequence[int], msg_id: int, timeout_s: float) -> list[Delivery]:
        """Receive message ``msg_id`` (segment 0) from every peer, in one call into C."""
        return self.recv_parts(peers, msg_id, [(0, 0, self.recv_layout.n_floats)], timeout_s,
                               unwire=True)

    def recv_parts(self, peers: Sequence[int], msg_id: int,
                   parts: Sequence[tuple[int, int, int]], timeout_s: float,
                   unwire: bool = False) -> list[Delivery]:
        """Receive every (segment, float offset, float count) part from every peer, in one call.

        A peer's parts land in one full-length vector and mask; the Delivery's counters are summed
        over the parts, and with several parts each part's close threshold is reported as
        ``threshold_<segment>``. ``unwire`` undoes the critical-first wire order (one part only).
        """
        n = self.recv_layout.n_floats
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
                values, mask = self.recv_wire.from_wire(values, mask)
            out.append(_delivery(self.recv_layout, values, mask, got[k * per:(k + 1) * per],
                                 [seg for seg, _, _ in parts]))
        return out

    def close(self) -> None:
        self.end.close()
