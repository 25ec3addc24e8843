"""LTP transport: the Loss-tolerant Transmission Protocol over UDP, driven by the native C core.

Each end owns one UDP socket and one protocol core (``transports/native``); Python crosses into C
once per operation: :meth:`LtpServer.gather` waits for every worker's message in one call,
:meth:`LtpServer.broadcast` sends the parameters to every worker in one call. Gradients (worker to
PS) are loss tolerant: the PS closes a message early once the adaptive threshold is met, and the
missing coordinates are repaired by a Bubble Filling strategy (:mod:`transports.filling`).
Parameters (PS to workers) are reliable by default (``pull_threshold=1.0``).

Addresses are static: the PS is given every worker's (ip, port) and only accepts datagrams from
them; a worker binds exactly the address the PS was given. The wire format, state machines and
the meaning of every option are in ``docs/ltp-protocol.md``.

    >>> from transports import registry
    >>> t = registry.create("ltp", {"rx_drop_frac": 0.1})
    >>> with t.serve(("127.0.0.1", 7000), workers, layout) as ps: ...
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transports import filling
from transports.base import (
    Addr,
    Delivery,
    Layout,
    OptionError,
    SendReport,
    ServerEnd,
    Transport,
    TransportError,
    TransportTimeout,
    WorkerEnd,
)

NATIVE_DIR = Path(__file__).resolve().parent / "native"
RANK_SERVER = 0xFFFF
SEND_ORDERS = ("sequential", "random", "priority")
PEER_SCHEDULES = ("fair", "serial")   # index = enum ltp_schedule
CLOSE_REASONS = {0: "none", 1: "complete", 2: "early", 3: "max_wait", 4: "stale"}
SEND_DONE = {0: "pending", 1: "closed", 2: "all_acked"}
_DATA_HDR_BYTES = 52


# ---------------------------------------------------------------------------- errors
class LtpError(TransportError):
    """The native LTP core reported an error; ``code`` is the C return code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class LtpTimeout(LtpError, TransportTimeout):
    """An LTP operation did not complete before its deadline."""


class LtpProtocolError(LtpError):
    """A request was refused by the protocol core (bad key, table full, message in progress)."""


class LtpSystemError(LtpError):
    """A socket call failed."""


_ERRORS: dict[int, tuple[type[LtpError], str]] = {
    -1: (LtpProtocolError, "an argument was invalid"),
    -2: (LtpSystemError, "the native core ran out of memory"),
    -3: (LtpTimeout, "the deadline passed before the peer finished"),
    -4: (LtpSystemError, "a socket call failed"),
    -5: (LtpProtocolError, "a bounded table (peers or open messages) is full"),
    -6: (LtpProtocolError, "no such peer or message"),
    -7: (LtpProtocolError, "a message with that id is already being sent"),
    -8: (LtpProtocolError, "a datagram was malformed"),
    -9: (LtpProtocolError, "a datagram came from an unknown peer"),
    -10: (LtpProtocolError, "a datagram carried another session id"),
    -11: (LtpProtocolError, "the message is stale"),
    -12: (LtpProtocolError, "an option name or value was rejected by the native core"),
    -13: (LtpProtocolError, "a datagram was dropped"),
}


def check(rc: int, what: str) -> int:
    """Return ``rc`` if it is not an error; otherwise raise the exception its C code maps to.

    This is the one place where native return codes become Python exceptions.
    """
    if rc >= 0:
        return rc
    cls, text = _ERRORS.get(rc, (LtpError, f"unknown native error {rc}"))
    message = f"{what}: {text}"
    if rc == -4:
        err = ctypes.get_errno()
        if err:
            message += f" ({errno_mod.errorcode.get(err, err)}: {os.strerror(err)})"
    raise cls(message + ".", rc)


# ---------------------------------------------------------------------------- native types
class SendStats(ctypes.Structure):
    """Mirror of ``ltp_send_stats_t``."""

    _fields_ = [(n, ctypes.c_uint64) for n in (
        "packets", "retransmits", "wire_bytes", "acked_packets", "count", "done", "peer_received",
        "elapsed_us")] + [(n, ctypes.c_double) for n in ("srtt_us", "pacing_rate_mbps", "btl_bw_mbps")]


class MsgStats(ctypes.Structure):
    """Mirror of ``ltp_msg_stats_t``."""

    _fields_ = [(n, ctypes.c_uint64) for n in (
        "packets", "count", "duplicates", "retransmits", "critical_count", "received_bytes",
        "total_bytes", "close_reason", "early_closed", "elapsed_us", "pass_us")] + [
        (n, ctypes.c_double) for n in ("threshold_frac", "peer_srtt_us")]


class SendReq(ctypes.Structure):
    """Mirror of ``ltp_send_req_t``."""

    _fields_ = [("peer", ctypes.c_int32), ("msg_id", ctypes.c_uint32), ("segment", ctypes.c_uint32),
                ("len_bytes", ctypes.c_uint32), ("data", ctypes.c_void_p),
                ("critical_bytes", ctypes.c_uint32), ("status", ctypes.c_int32), ("stats", SendStats)]


class RecvReq(ctypes.Structure):
    """Mirror of ``ltp_recv_req_t``."""

    _fields_ = [("peer", ctypes.c_int32), ("msg_id", ctypes.c_uint32), ("segment", ctypes.c_uint32),
                ("cap_bytes", ctypes.c_uint32), ("data", ctypes.c_void_p), ("mask", ctypes.c_void_p),
                ("status", ctypes.c_int32), ("stats", MsgStats)]


_LIB: ctypes.CDLL | None = None


def library_path() -> Path:
    """The native library: the newest of the extension built by pip and the Makefile's build.

    Both compile the same sources; taking the newest means a rebuild by either always wins.
    """
    found = [p for p in [*NATIVE_DIR.glob("_ltpcore*.so"), NATIVE_DIR / "build" / "libltp.so"]
             if p.exists()]
    if found:
        return max(found, key=lambda p: p.stat().st_mtime)
    raise TransportError(
        "the native LTP library is not built; run `.venv/bin/pip install -e .` (or "
        "`make -C transports/native lib`) in the project folder."
    )


def lib() -> ctypes.CDLL:
    """Load the native library once and declare the signatures used here."""
    global _LIB
    if _LIB is not None:
        return _LIB
    so = ctypes.CDLL(str(library_path()), use_errno=True)
    vp, i32, u16, u32, u64, dbl = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint16, ctypes.c_uint32,
                                   ctypes.c_uint64, ctypes.c_double)
    sigs = {
        "ltp_config_size": (ctypes.c_size_t, []),
        "ltp_config_default": (None, [vp]),
        "ltp_config_set": (i32, [vp, ctypes.c_char_p, dbl]),
        "ltp_config_validate": (i32, [vp]),
        "ltp_chunk_bytes": (u32, [vp]),
        "ltp_stat_name": (ctypes.c_char_p, [i32]),
        "ltp_stat_count": (i32, []),
        "ltp_udp_open": (vp, [vp, u16, ctypes.c_char_p, u16, dbl, ctypes.POINTER(i32)]),
        "ltp_udp_close": (None, [vp]),
        "ltp_udp_add_peer": (i32, [vp, u16, ctypes.c_char_p, u16]),
        "ltp_udp_local_port": (i32, [vp]),
        "ltp_udp_join": (i32, [vp, i32, u64]),
        "ltp_udp_wait_greeted": (i32, [vp, u64]),
        "ltp_udp_send": (i32, [vp, ctypes.POINTER(SendReq), i32, u64]),
        "ltp_udp_recv": (i32, [vp, ctypes.POINTER(RecvReq), i32, u64]),
        "ltp_udp_service": (i32, [vp, u64]),
        "ltp_udp_stats": (None, [vp, ctypes.POINTER(u64), i32]),
        "ltp_udp_threshold": (dbl, [vp, i32, u16]),
        "ltp_udp_set_policy": (i32, [vp, u16, dbl, dbl]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(so, name)
        fn.restype, fn.argtypes = res, args
    _LIB = so
    return so


def stat_names() -> list[str]:
    """Names of the cumulative counters, in the order the native core reports them."""
    so = lib()
    return [so.ltp_stat_name(i).decode() for i in range(so.ltp_stat_count())]


# ---------------------------------------------------------------------------- options
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


class LtpTransport(Transport):
    """LTP: out-of-order packets, selective ACKs, early close, BBR-like pacing, Bubble Filling."""

    DEFAULTS: Mapping[str, Any] = {
        "threshold_min": 0.80,
        "threshold_max": 0.99,
        "loss_weight": 1.0,
        "rtt_weight": 0.05,
        "close_grace_min_us": 1000,
        "grace_rtt_mult": 2.0,
        "max_wait_ms": 1000.0,
        "filler": "masked-mean",
        "packet_payload_bytes": 1472,
        "send_order": "priority",
        "peer_schedule": "serial",
        "cc": True,
        "fixed_rate_mbps": 0.0,
        "rate_hint": True,
        "hint_gain": 1.10,
        "cwnd_ack_extra_us": 2000,
        "pull_threshold": 1.0,
        "critical_segments": (),
        "ack_every": 8,
        "ack_delay_us": 200,
        "max_open_per_peer": 4,
        "session_id": 1,
        "linger_ms": 200.0,
        "rx_drop_frac": 0.0,
        "seed": 1,
    }

    _RANGES = {  # option: (low, high, integer?)
        "threshold_min": (0.0, 1.0, False),
        "threshold_max": (0.0, 1.0, False),
        "loss_weight": (0.0, 100.0, False),
        "rtt_weight": (0.0, 1.0, False),
        "close_grace_min_us": (0, 60_000_000, True),
        "grace_rtt_mult": (0.0, 1000.0, False),
        "max_wait_ms": (0.001, 3_600_000.0, False),
        "linger_ms": (0.0, 60_000.0, False),
        "packet_payload_bytes": (_DATA_HDR_BYTES + 4, 65507, True),
        "fixed_rate_mbps": (0.0, 1e6, False),
        "hint_gain": (0.5, 4.0, False),
        "cwnd_ack_extra_us": (0, 1_000_000, True),
        "pull_threshold": (0.0, 1.0, False),
        "ack_every": (1, 1024, True),
        "ack_delay_us": (0, 1_000_000, True),
        "max_open_per_peer": (1, 1024, True),
        "session_id": (0, 2**32 - 1, True),
        "rx_drop_frac": (0.0, 0.99, False),
        "seed": (0, 2**63 - 1, True),
    }

    def validate(self) -> None:
        o = self._options
        for name, (lo, hi, integer) in self._RANGES.items():
            v = o[name]
            if not _is_number(v) or (integer and int(v) != v) or not lo <= v <= hi:
                kind = "an integer" if integer else "a number"
                raise OptionError(f"LTP option {name!r} must be {kind} from {lo} to {hi}, not {v!r}.")
        if o["threshold_min"] > o["threshold_max"]:
            raise OptionError(
                f"LTP threshold_min ({o['threshold_min']}) must not exceed threshold_max "
                f"({o['threshold_max']}); set them equal for a fixed threshold."
            )
        if o["filler"] not in filling.FILLERS:
            raise OptionError(
                f"LTP filler must be one of {', '.join(filling.FILLERS)}, not {o['filler']!r}."
            )
        if o["send_order"] not in SEND_ORDERS:
            raise OptionError(
                f"LTP send_order must be one of {', '.join(SEND_ORDERS)}, not {o['send_order']!r}."
            )
        if o["peer_schedule"] not in PEER_SCHEDULES:
            raise OptionError(
                f"LTP peer_schedule must be one of {', '.join(PEER_SCHEDULES)}, "
                f"not {o['peer_schedule']!r}."
            )
        for name in ("cc", "rate_hint"):
            if not isinstance(o[name], bool):
                raise OptionError(f"LTP option {name!r} must be True or False, not {o[name]!r}.")
        crit = o["critical_segments"]
        if isinstance(crit, str) or not all(isinstance(s, str) for s in crit):
            raise OptionError(
                "LTP critical_segments must be a list of segment names such as ['fc2.bias']."
            )

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout) -> LtpServer:
        return LtpServer(self._options, bind, workers, layout)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout) -> LtpWorker:
        return LtpWorker(self._options, rank, bind, server, layout)


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


def _timeout_us(timeout_s: float) -> int:
    return max(1, int(timeout_s * 1e6))


class _Endpoint:
    """One UDP socket plus one native core, configured from the transport's options."""

    def __init__(self, options: Mapping[str, Any], rank: int, bind: Addr, layout: Layout,
                 receive_thresholds: tuple[float, float],
                 core_settings: Mapping[str, float] | None = None) -> None:
        self.options = dict(options)
        self.layout = layout
        self.wire = _WireOrder(layout, self.options["critical_segments"])
        so = lib()
        cfg = ctypes.create_string_buffer(so.ltp_config_size())
        so.ltp_config_default(cfg)
        o = self.options
        lo, hi = receive_thresholds
        settings = {
            "session_id": o["session_id"], "max_udp_payload_bytes": o["packet_payload_bytes"],
            "max_msg_bytes": max(4, layout.n_bytes), "send_order": SEND_ORDERS.index(o["send_order"]),
            "peer_schedule": PEER_SCHEDULES.index(o["peer_schedule"]),
            "seed": o["seed"], "threshold_min": lo, "threshold_max": hi,
            "loss_weight": o["loss_weight"], "rtt_weight": o["rtt_weight"],
            "close_grace_min_us": o["close_grace_min_us"], "grace_rtt_mult": o["grace_rtt_mult"],
            "max_wait_us": round(o["max_wait_ms"] * 1000), "ack_every": o["ack_every"],
            "ack_delay_us": o["ack_delay_us"], "max_open_per_peer": o["max_open_per_peer"],
            "cc": int(o["cc"]), "fixed_rate_mbps": o["fixed_rate_mbps"],
            "rate_hint": int(o["rate_hint"]), "hint_gain": o["hint_gain"],
            "cwnd_ack_extra_us": o["cwnd_ack_extra_us"],
            **(core_settings or {}),
        }
        for name, value in settings.items():
            check(so.ltp_config_set(cfg, name.encode(), float(value)), f"LTP option {name}={value}")
        check(so.ltp_config_validate(cfg), "LTP configuration")
        err = ctypes.c_int(0)
        ctypes.set_errno(0)
        handle = so.ltp_udp_open(cfg, rank, bind[0].encode(), bind[1], float(o["rx_drop_frac"]),
                                 ctypes.byref(err))
        if not handle:
            check(err.value or -1, f"opening the LTP socket on {bind[0]}:{bind[1]}")
        self._h: int | None = handle
        self._so = so

    @property
    def handle(self) -> int:
        if self._h is None:
            raise TransportError("this LTP end is closed; open a new one.")
        return self._h

    def add_peer(self, rank: int, addr: Addr) -> int:
        return check(self._so.ltp_udp_add_peer(self.handle, rank, addr[0].encode(), addr[1]),
                     f"adding peer {addr[0]}:{addr[1]}")

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
        reqs = (SendReq * (len(peers) * len(parts)))()
        slots = [(peer, seg, arr) for peer in peers for seg, arr in parts]
        for r, (peer, seg, arr) in zip(reqs, slots):
            r.peer, r.msg_id, r.segment = peer, msg_id & 0xFFFFFFFF, seg
            r.len_bytes, r.data = arr.nbytes, arr.ctypes.data
            r.critical_bytes = critical_bytes
        rc = self._so.ltp_udp_send(self.handle, reqs, len(reqs), _timeout_us(timeout_s))
        if rc < 0:
            failed = sorted({slots[i][0] for i, r in enumerate(reqs) if r.status < 0})
            check(rc, f"sending message {msg_id} (peers {failed} did not finish)")
        per = len(parts)
        nbytes = sum(arr.nbytes for _, arr in parts)
        return [self._report(nbytes, [reqs[i * per + j].stats for j in range(per)])
                for i in range(len(peers))]

    @staticmethod
    def _report(nbytes: int, parts: Sequence[SendStats]) -> SendReport:
        last = parts[-1]  # rate and RTT estimates are per peer: any part has the latest
        stats = {"acked_packets": float(sum(s.acked_packets for s in parts)),
                 "count": float(sum(s.count for s in parts)),
                 "closed_by_peer": float(sum(s.done == 1 for s in parts)),
                 "peer_received": float(sum(s.peer_received for s in parts)),
                 "elapsed_us": float(max(s.elapsed_us for s in parts)), "srtt_us": last.srtt_us,
                 "pacing_rate_mbps": last.pacing_rate_mbps, "btl_bw_mbps": last.btl_bw_mbps}
        return SendReport(nbytes, int(sum(s.wire_bytes for s in parts)),
                          packets=int(sum(s.packets + s.retransmits for s in parts)),
                          retransmits=int(sum(s.retransmits for s in parts)), stats=stats)

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
        bufs = [np.zeros(n, dtype=np.float32) for _ in peers]
        masks = [np.zeros(n, dtype=np.bool_) for _ in peers]
        reqs = (RecvReq * (len(peers) * len(parts)))()
        slots = [(k, seg, off, cnt) for k in range(len(peers)) for seg, off, cnt in parts]
        for r, (k, seg, off, cnt) in zip(reqs, slots):
            r.peer, r.msg_id, r.segment, r.cap_bytes = peers[k], msg_id & 0xFFFFFFFF, seg, 4 * cnt
            r.data = bufs[k].ctypes.data + 4 * off
            r.mask = masks[k].ctypes.data + off
        rc = self._so.ltp_udp_recv(self.handle, reqs, len(reqs), _timeout_us(timeout_s))
        if rc < 0:
            failed = sorted({peers[slots[i][0]] for i, r in enumerate(reqs) if r.status < 0})
            check(rc, f"receiving message {msg_id} (peers {failed} did not finish)")
        out = []
        per = len(parts)
        for k in range(len(peers)):
            got = [reqs[k * per + j].stats for j in range(per)]
            received = sum(s.received_bytes for s in got)
            total = sum(s.total_bytes for s in got)
            values, mask = bufs[k], masks[k]
            if unwire:
                values, mask = self.wire.from_wire(values, mask)
            complete = received == total
            stats = {name: float(sum(getattr(s, name) for s in got))
                     for name in ("packets", "count", "duplicates", "retransmits", "early_closed")}
            stats.update(critical_packets=float(sum(s.critical_count for s in got)),
                         close_reason=float(max(s.close_reason for s in got)),
                         elapsed_us=float(max(s.elapsed_us for s in got)),
                         pass_us=float(max(s.pass_us for s in got)),
                         threshold_frac=min(s.threshold_frac for s in got),
                         peer_srtt_us=got[-1].peer_srtt_us)
            if per > 1:
                stats.update({f"threshold_{seg}": s.threshold_frac
                              for (seg, _, _), s in zip(parts, got)})
            frac = 1.0 if complete else float(received) / float(total)
            m = None if complete else mask
            out.append(Delivery(values, m, frac, _segment_fracs(self.layout, m), stats))
        return out

    def threshold(self, peer: int) -> float:
        """The early-close threshold currently in force for messages from ``peer``."""
        return float(self._so.ltp_udp_threshold(self.handle, peer, 0))

    def stats(self) -> dict[str, float]:
        if self._h is None:
            return {}
        names = stat_names()
        arr = (ctypes.c_uint64 * len(names))()
        self._so.ltp_udp_stats(self._h, arr, len(names))
        return {name: float(v) for name, v in zip(names, arr)}

    def close(self) -> None:
        if self._h is not None:
            self._so.ltp_udp_close(self._h)
            self._h = None


# ---------------------------------------------------------------------------- the two ends
class LtpServer(ServerEnd):
    """The PS end: one socket, one peer slot per worker (slot == rank)."""

    def __init__(self, options: Mapping[str, Any], bind: Addr, workers: Sequence[Addr],
                 layout: Layout) -> None:
        self.layout = layout
        self.n_workers = len(workers)
        self.filler = filling.Filler(options["filler"])
        self.linger_s = options["linger_ms"] / 1000.0
        self.end = _Endpoint(options, RANK_SERVER, bind, layout,
                             (options["threshold_min"], options["threshold_max"]))
        try:
            for rank, addr in enumerate(workers):
                self.end.add_peer(rank, addr)
        except BaseException:
            self.end.close()
            raise

    def wait_for_workers(self, timeout_s: float) -> None:
        rc = self.end._so.ltp_udp_wait_greeted(self.end.handle, _timeout_us(timeout_s))
        check(rc, f"waiting for {self.n_workers} workers to say HELLO")

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deliveries = self.end.recv(range(self.n_workers), msg_id, timeout_s)
        return [self.filler.apply(rank, d) for rank, d in enumerate(deliveries)]

    def broadcast(self, msg_id: int, values: np.ndarray, timeout_s: float) -> list[SendReport]:
        return self.end.send(range(self.n_workers), msg_id, values, timeout_s)

    def average(self, deliveries: Sequence[Delivery]) -> np.ndarray:
        if self.filler.kind == "masked-mean":
            return filling.masked_mean(deliveries)
        return super().average(deliveries)

    def threshold(self, rank: int) -> float:
        """The early-close threshold currently in force for worker ``rank``'s gradients."""
        return self.end.threshold(rank)

    def service(self, duration_s: float) -> None:
        """Run the protocol for ``duration_s`` without a request (answers late data, repeats CLOSE)."""
        check(self.end._so.ltp_udp_service(self.end.handle, _timeout_us(duration_s)), "servicing LTP")

    def stats(self) -> dict[str, float]:
        return self.end.stats()

    def close(self) -> None:
        """Linger for ``linger_ms`` answering late data, then release the socket and core.

        The protocol only runs inside calls: without the linger, a worker whose last CLOSE copies
        were all lost would retransmit its final gradient to a PS that is gone until it timed out.
        """
        if self.end._h is not None and self.linger_s > 0:
            try:
                self.service(self.linger_s)
            except TransportError:
                pass  # closing anyway
        self.end.close()


class LtpWorker(WorkerEnd):
    """A worker's end: one socket with the PS as its only peer."""

    def __init__(self, options: Mapping[str, Any], rank: int, bind: Addr, server: Addr,
                 layout: Layout, core_settings: Mapping[str, float] | None = None) -> None:
        if not 0 <= rank < RANK_SERVER:
            raise OptionError(f"an LTP worker rank must be from 0 to {RANK_SERVER - 1}, not {rank}.")
        self.rank = rank
        self.layout = layout
        # A parameter that did not arrive keeps the worker's previous value: zeroing weights
        # would wreck the model, and masked-mean needs several senders. (With the default
        # pull_threshold of 1.0 every parameter arrives anyway.)
        self.filler = filling.Filler("previous")
        pull = options["pull_threshold"]
        self.end = _Endpoint(options, rank, bind, layout, (pull, pull), core_settings)
        try:
            self.server_peer = self.end.add_peer(RANK_SERVER, server)
        except BaseException:
            self.end.close()
            raise

    def join(self, timeout_s: float) -> None:
        rc = self.end._so.ltp_udp_join(self.end.handle, self.server_peer, _timeout_us(timeout_s))
        check(rc, f"worker {self.rank} joining the PS")

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        return self.end.send([self.server_peer], msg_id, values, timeout_s)[0]

    def pull(self, msg_id: int, timeout_s: float) -> Delivery:
        delivery = self.end.recv([self.server_peer], msg_id, timeout_s)[0]
        return self.filler.apply(0, delivery)

    def service(self, duration_s: float) -> None:
        """Run the protocol for ``duration_s`` without a request (answers late data, repeats CLOSE)."""
        check(self.end._so.ltp_udp_service(self.end.handle, _timeout_us(duration_s)), "servicing LTP")

    def stats(self) -> dict[str, float]:
        return self.end.stats()

    def close(self) -> None:
        self.end.close()
