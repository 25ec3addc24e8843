"""The Python binding of the native LTP core (``transports/native``), through cffi.

Everything this binding knows about C it reads from C. Function signatures and structure layouts
come from ``include/ltp.h`` (the cdef is generated from the header when the extension is built,
and the compiler checks every layout: ``build_ffi.py``); option names, types, ranges, defaults,
units and help from the core's option table (``ltp_option``); enum value names from
``ltp_enum_name`` and the header's enums; counter names from ``ltp_stat_name``; error texts from
``ltp_strerror``. The one table written here maps C error names to Python exception classes.

Python crosses into C once per operation: :meth:`Endpoint.send` and :meth:`Endpoint.recv` take
every (peer, message, segment) of one call at once, and cffi releases the GIL while C works.
The extension is built by ``pip install -e .`` (``./setup.sh`` runs it); nothing else builds it.

    >>> from transports import native
    >>> native.core_options()["ack_every"].default
    8
    >>> with native.Endpoint({"ack_every": 4}, rank=0, bind=("127.0.0.1", 0)) as end: ...
"""

from __future__ import annotations

import dataclasses
import errno as errno_mod
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transports.base import Addr, TransportError, TransportTimeout


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
    """A socket call failed, or the core ran out of memory."""


# Exception class by C error name (enum ltp_err); every other known code is a protocol error.
_EXCEPTIONS = {"LTP_ETIMEDOUT": LtpTimeout, "LTP_ESYS": LtpSystemError,
               "LTP_ENOMEM": LtpSystemError}


@functools.cache
def _core() -> tuple[Any, Any]:
    """(ffi, lib) of the extension module, imported once."""
    try:
        from transports.native import _ltp_cffi
    except ImportError as exc:
        raise TransportError(
            "the native LTP core is not built; run ./setup.sh (or `.venv/bin/pip install -e .`) "
            "in the project folder."
        ) from exc
    return _ltp_cffi.ffi, _ltp_cffi.lib


def library_path() -> Path:
    """The built extension module (raises :class:`TransportError` if it is not built)."""
    _core()
    from transports.native import _ltp_cffi

    return Path(_ltp_cffi.__file__)


def rank_server() -> int:
    """The parameter server's rank on the wire (``LTP_RANK_SERVER``)."""
    return int(_core()[1].LTP_RANK_SERVER)


def _text(ptr: Any) -> str | None:
    ffi, _ = _core()
    return None if ptr == ffi.NULL else ffi.string(ptr).decode()


@functools.cache
def error_names() -> dict[int, str]:
    """C error code -> its name in ``enum ltp_err`` (``-3: "LTP_ETIMEDOUT"``)."""
    ffi, _ = _core()
    return dict(ffi.typeof("enum ltp_err").elements)


def check(rc: int, what: str) -> int:
    """Return ``rc`` if it is not an error; otherwise raise the exception its C code maps to.

    This is the one place where native return codes become Python exceptions; the text is the
    core's own (``ltp_strerror``).
    """
    if rc >= 0:
        return rc
    ffi, lib = _core()
    name = error_names().get(rc)
    cls = LtpError if name is None else _EXCEPTIONS.get(name, LtpProtocolError)
    message = f"{what}: {_text(lib.ltp_strerror(rc))}"
    if name == "LTP_ESYS" and ffi.errno:
        message += f" ({errno_mod.errorcode.get(ffi.errno, ffi.errno)}: {os.strerror(ffi.errno)})"
    raise cls(message + ".", rc)


# ---------------------------------------------------------------------------- C's tables
def enum_names(enum_id: int) -> tuple[str, ...]:
    """Value names of an exported enum (``enum ltp_enum_id``), indexed by value."""
    _, lib = _core()
    names = []
    while (name := _text(lib.ltp_enum_name(enum_id, len(names)))) is not None:
        names.append(name)
    return tuple(names)


def close_reasons() -> tuple[str, ...]:
    """Names of ``enum ltp_close_reason`` by value (a Delivery's ``close_reason`` statistic)."""
    return enum_names(_core()[1].LTP_ENUM_CLOSE_REASON)


def send_done() -> tuple[str, ...]:
    """Names of ``enum ltp_send_done`` by value."""
    return enum_names(_core()[1].LTP_ENUM_SEND_DONE)


@functools.cache
def stat_names() -> tuple[str, ...]:
    """Names of the cumulative counters, in the order the native core reports them."""
    _, lib = _core()
    return tuple(_text(lib.ltp_stat_name(i)) for i in range(lib.ltp_stat_count()))


@functools.cache
def rejection_stats() -> tuple[str, ...]:
    """The counters of datagrams (or fields of them) that validation refused or clamped
    (``LTP_STAT_REJECT``): zero on an endpoint that hears only its own run's peers."""
    _, lib = _core()
    return tuple(name for i, name in enumerate(stat_names())
                 if lib.ltp_stat_kind(i) == lib.LTP_STAT_REJECT)


def tos_mark(tos: int) -> int:
    """A :class:`SendItem`'s ``tos`` that gives its DATA datagrams the IP TOS byte ``tos``
    (``LTP_TOS_MARK``, ``ltp_send_req_t.tos``)."""
    if not 0 <= tos <= 0xFF:
        raise ValueError(f"an IP TOS byte is from 0 to 255, not {tos}.")
    return int(_core()[1].LTP_TOS_MARK) | int(tos)


def key_bytes() -> int:
    """Bytes of a pair's key the MAC uses (``LTP_KEY_BYTES``)."""
    return int(_core()[1].LTP_KEY_BYTES)


@dataclasses.dataclass(frozen=True)
class CoreOption:
    """One row of the core's option table: one ``ltp_config_t`` field."""

    name: str
    kind: str                   # "int", "float", "bool" or "choice"
    low: float
    high: float
    default: Any                # int, float, bool, or a choice's name
    unit: str
    help: str
    choices: tuple[str, ...] = ()

    def to_core(self, value: Any) -> float:
        """The number ``ltp_config_set`` takes for ``value`` (a choice's index, a bool's 0/1)."""
        return float(self.choices.index(value) if self.kind == "choice" else value)


@functools.cache
def core_options() -> dict[str, CoreOption]:
    """The core's option table by name, in ``ltp_config_t`` order."""
    ffi, lib = _core()
    kinds = {lib.LTP_OPT_U32: "int", lib.LTP_OPT_U64: "int", lib.LTP_OPT_DOUBLE: "float",
             lib.LTP_OPT_BOOL: "bool", lib.LTP_OPT_ENUM: "choice"}
    out = {}
    for i in range(lib.ltp_option_count()):
        o = lib.ltp_option(i)
        kind = kinds[o.type]
        choices = enum_names(o.enum_id) if kind == "choice" else ()
        default = {"int": int, "float": float, "bool": bool,
                   "choice": lambda v: choices[int(v)]}[kind](o.default_value)
        name = _text(o.name)
        out[name] = CoreOption(name, kind, o.min, o.max, default, _text(o.unit), _text(o.help),
                               choices)
    return out


def config_problem(settings: Mapping[str, float]) -> str | None:
    """Why the core would refuse a configuration with these settings, or None.

    ``settings`` maps ``ltp_config_t`` field names to the numbers ``ltp_config_set`` takes.
    """
    return _explain(_config(settings))


def _config(settings: Mapping[str, float]) -> Any:
    ffi, lib = _core()
    cfg = ffi.new("ltp_config_t *")
    lib.ltp_config_default(cfg)
    for name, value in settings.items():
        check(lib.ltp_config_set(cfg, name.encode(), float(value)), f"LTP option {name}={value}")
    return cfg


def _explain(cfg: Any) -> str | None:
    ffi, lib = _core()
    why = ffi.new("char[]", 256)
    return None if lib.ltp_config_explain(cfg, why, len(why)) == 0 else ffi.string(why).decode()


@functools.cache
def _fields(ctype: str) -> tuple[str, ...]:
    ffi, _ = _core()
    return tuple(name for name, _ in ffi.typeof(ctype).fields)


def _as_dict(struct: Any, ctype: str) -> dict[str, float]:
    return {name: float(getattr(struct, name)) for name in _fields(ctype)}


def _timeout_us(timeout_s: float) -> int:
    return max(1, int(timeout_s * 1e6))


# ---------------------------------------------------------------------------- one endpoint
@dataclasses.dataclass(frozen=True)
class SendItem:
    """One message to one peer: a contiguous float32 payload as one (msg_id, segment)."""

    peer: int
    msg_id: int
    segment: int
    payload: np.ndarray
    critical_bytes: int = 0
    tos: int = 0   # 0: the socket's TOS; else :func:`tos_mark` of the byte its DATA carry


@dataclasses.dataclass(frozen=True)
class RecvItem:
    """Where one message from one peer lands: contiguous float32 and bool views of equal length."""

    peer: int
    msg_id: int
    segment: int
    values: np.ndarray
    mask: np.ndarray


class Endpoint:
    """One UDP socket and one protocol core (``ltp_udp_*``), configured by ``settings``.

    ``settings`` maps ``ltp_config_t`` field names to numbers (see :func:`core_options`); unset
    fields keep the core's defaults. Every method is one call into C. Closing twice is safe.
    """

    def __init__(self, settings: Mapping[str, float], rank: int, bind: Addr,
                 rx_drop_frac: float = 0.0) -> None:
        ffi, lib = _core()
        cfg = _config(settings)
        problem = _explain(cfg)
        if problem:
            raise LtpProtocolError(f"LTP configuration: {problem}.", lib.LTP_EOPTION)
        err = ffi.new("int *")
        ffi.errno = 0
        handle = lib.ltp_udp_open(cfg, rank, bind[0].encode(), bind[1], float(rx_drop_frac), err)
        if handle == ffi.NULL:
            check(err[0] or lib.LTP_EINVAL, f"opening the LTP socket on {bind[0]}:{bind[1]}")
        self._handle = handle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._handle is None

    def _live(self) -> Any:
        if self._handle is None:
            raise TransportError("this LTP end is closed; open a new one.")
        return self._handle

    def add_peer(self, rank: int, addr: Addr) -> int:
        """Accept datagrams from (and send to) ``addr`` as peer ``rank``; returns its slot."""
        return check(_core()[1].ltp_udp_add_peer(self._live(), rank, addr[0].encode(), addr[1]),
                     f"adding peer {addr[0]}:{addr[1]}")

    @property
    def datagram_bytes(self) -> int:
        """The datagram size in use, LTP header included (from the path MTU unless configured)."""
        return check(_core()[1].ltp_udp_datagram(self._live()), "reading the datagram size")

    @property
    def offload(self) -> dict[str, bool]:
        """UDP offloads in use: ``gso`` (runs of datagrams to a peer sent as one write) and
        ``gro`` (coalesced runs read at once)."""
        ffi, lib = _core()
        bits = check(lib.ltp_udp_offload(self._live()), "reading the offloads")
        return {"gso": bool(bits & lib.LTP_OFFLOAD_GSO), "gro": bool(bits & lib.LTP_OFFLOAD_GRO)}

    def join(self, peer: int, timeout_s: float, what: str = "joining the peer") -> None:
        """Say HELLO to peer slot ``peer`` until it answers, or raise :class:`LtpTimeout`."""
        check(_core()[1].ltp_udp_join(self._live(), peer, _timeout_us(timeout_s)), what)

    def wait_greeted(self, timeout_s: float, what: str = "waiting for every peer's HELLO") -> None:
        """Return once every peer has said HELLO, or raise :class:`LtpTimeout`."""
        check(_core()[1].ltp_udp_wait_greeted(self._live(), _timeout_us(timeout_s)), what)

    def service(self, duration_s: float) -> None:
        """Run the protocol for ``duration_s`` without a request (answers late data, repeats CLOSE)."""
        check(_core()[1].ltp_udp_service(self._live(), _timeout_us(duration_s)), "servicing LTP")

    def expect(self, segment: int, total_bytes: int, critical_bytes: int = 0) -> None:
        """Receive only this shape for ``segment`` (and, once one is given, no other segment)."""
        check(_core()[1].ltp_udp_expect(self._live(), segment, total_bytes, critical_bytes),
              f"expecting segment {segment} of {total_bytes} bytes")

    def set_peer_key(self, peer: int, key: bytes) -> None:
        """The MAC key this end and peer slot ``peer`` share (its first :func:`key_bytes` bytes
        are used): with auth on nothing is sent to the peer or taken from it before it is set."""
        key = bytes(key[:key_bytes()])
        check(_core()[1].ltp_udp_set_peer_key(self._live(), peer, key, len(key)),
              f"setting the key of peer {peer}")

    def linger(self, max_s: float) -> None:
        """Stay until no peer can need this end any more (``ltp_udp_linger``), ``max_s`` at most."""
        check(_core()[1].ltp_udp_linger(self._live(), _timeout_us(max_s)), "lingering before closing")

    def set_tos(self, tos: int) -> None:
        """The IP TOS byte of every datagram a send does not mark (``ltp_udp_set_tos``)."""
        check(_core()[1].ltp_udp_set_tos(self._live(), int(tos)), f"setting the IP TOS to {tos}")

    def set_policy(self, segment: int, threshold_min: float, threshold_max: float) -> None:
        """Close messages of ``segment`` between these thresholds instead of the configured ones."""
        check(_core()[1].ltp_udp_set_policy(self._live(), segment, threshold_min, threshold_max),
              f"setting the thresholds of segment {segment}")

    def threshold(self, peer: int, segment: int = 0) -> float:
        """The early-close threshold currently in force for ``segment`` messages from ``peer``."""
        return float(_core()[1].ltp_udp_threshold(self._live(), peer, segment))

    def send(self, items: Sequence[SendItem], timeout_s: float,
             what: str = "sending", partial: bool = False) -> list[dict[str, float] | None]:
        """Send every item concurrently; one ``ltp_send_stats_t`` (as a dict) per item.

        A message the receiver refused as stale (it had moved past it) is not an error of the
        call: its stats say so (``done`` is ``send_done().index("stale")``). With ``partial``, an
        item not finished by the deadline comes back as None instead of raising
        :class:`LtpTimeout` for all of them. Either way a send not finished by the deadline is
        suspended, not cancelled: sending the same message again resumes it where it stopped
        (``ltp_udp_send``; docs/ltp-protocol.md §3, "Deadlines").
        """
        ffi, lib = _core()
        reqs = ffi.new("ltp_send_req_t[]", len(items))
        keep = [ffi.from_buffer(it.payload) for it in items]   # alive until C returns
        for r, it, buf in zip(reqs, items, keep):
            r.peer, r.msg_id, r.segment = it.peer, it.msg_id & 0xFFFFFFFF, it.segment
            r.len_bytes, r.data, r.critical_bytes = it.payload.nbytes, buf, it.critical_bytes
            r.tos = it.tos
        rc = lib.ltp_udp_send(self._live(), reqs, len(items), _timeout_us(timeout_s))
        unfinished = partial and (rc == lib.LTP_ETIMEDOUT or any(
            r.status == lib.LTP_ETIMEDOUT for r in reqs))
        failed = [(it.peer, r.status) for it, r in zip(items, reqs)
                  if r.status < 0 and r.status != lib.LTP_ESTALE
                  and not (partial and r.status == lib.LTP_ETIMEDOUT)]
        if failed:
            check(failed[0][1], f"{what} (peers {sorted({p for p, _ in failed})} did not finish)")
        elif rc < 0 and rc != lib.LTP_ESTALE and not unfinished:
            check(rc, what)
        return [None if partial and r.status == lib.LTP_ETIMEDOUT
                else _as_dict(r.stats, "ltp_send_stats_t") for r in reqs]

    def _recv_reqs(self, items: Sequence[RecvItem]) -> tuple[Any, list]:
        ffi, _ = _core()
        reqs = ffi.new("ltp_recv_req_t[]", len(items))
        keep = [(ffi.from_buffer(it.values, require_writable=True),
                 ffi.from_buffer(it.mask, require_writable=True)) for it in items]
        for r, it, (values, mask) in zip(reqs, items, keep):
            r.peer, r.msg_id, r.segment = it.peer, it.msg_id & 0xFFFFFFFF, it.segment
            r.cap_bytes, r.data, r.mask = it.values.nbytes, values, mask
        return reqs, keep

    def recv(self, items: Sequence[RecvItem], timeout_s: float,
             what: str = "receiving") -> list[dict[str, float]]:
        """Wait for every item's message to close and take it into its views; one
        ``ltp_msg_stats_t`` (as a dict) per item. Missing values are 0, their mask False."""
        _, lib = _core()
        reqs, keep = self._recv_reqs(items)
        rc = lib.ltp_udp_recv(self._live(), reqs, len(items), _timeout_us(timeout_s))
        if rc < 0:
            failed = sorted({it.peer for it, r in zip(items, reqs) if r.status < 0})
            check(rc, f"{what} (peers {failed} did not finish)")
        return [_as_dict(r.stats, "ltp_msg_stats_t") for r in reqs]

    def recv_some(self, items: Sequence[RecvItem], min_done: int, timeout_s: float,
                  what: str = "receiving") -> list[dict[str, float] | None]:
        """Wait until ``min_done`` of the items' messages have closed (or the deadline), then take
        every closed one into its views (``ltp_udp_recv_some``). One ``ltp_msg_stats_t`` per item
        taken, None for an item not taken: its message stays with the core, and asking for it
        again later takes it. Reaching the deadline is not an error."""
        _, lib = _core()
        reqs, keep = self._recv_reqs(items)
        check(lib.ltp_udp_recv_some(self._live(), reqs, len(items), int(min_done),
                                    _timeout_us(timeout_s)), what)
        return [_as_dict(r.stats, "ltp_msg_stats_t") if r.status == 0 else None for r in reqs]

    def stats(self) -> dict[str, float]:
        """Cumulative counters by name ({} once closed)."""
        if self._handle is None:
            return {}
        ffi, lib = _core()
        names = stat_names()
        out = ffi.new("uint64_t[]", len(names))
        lib.ltp_udp_stats(self._handle, out, len(names))
        return {name: float(v) for name, v in zip(names, out)}

    def close(self) -> None:
        """Stop the progress thread and release the socket and the core."""
        if self._handle is not None:
            _core()[1].ltp_udp_close(self._handle)
            self._handle = None

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
