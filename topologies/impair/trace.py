"""Loss traces on disk: which packet positions of one host's ingress were dropped.

The eBPF loss program (``topologies/impair/geloss/``) records every drop of its chained models,
``ge-loss dump`` writes a host's as a file, and ``trace:FOLDER`` (:class:`topologies.impair.loss.
Trace`) replays a folder of them, one ``<host>.trace`` per host. The format is the C side's
(``ge_trace.h``): ``GETRACE1``, the positions covered and the drops among them as little-endian
64-bit numbers, then one bit per position in little-endian 64-bit words. :func:`read_trace`
reads one; :func:`same_positions` says where two traces agree, which is how a test shows that
two runs with one seed met the same losses.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from pathlib import Path

import numpy as np

from transports.base import UserError


class TraceError(UserError, ValueError):
    """A file is not a loss trace."""


TRACE_MAGIC = b"GETRACE1"
TRACE_SUFFIX = ".trace"


@dataclasses.dataclass(frozen=True)
class LossTrace:
    """One host's recorded losses (:func:`read_trace`)."""

    packets: int
    """Packet positions the trace covers."""
    dropped: np.ndarray
    """The positions dropped, ascending."""

    @property
    def loss_pct(self) -> float:
        """The share of the positions dropped, in percent."""
        return 100 * len(self.dropped) / self.packets if self.packets else 0.0


def read_trace(path: Path | str) -> LossTrace:
    """A trace file (``topologies/impair/geloss/ge_trace.h``); raise :class:`TraceError` with
    one sentence if it is not one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read the loss trace {path} ({exc.strerror}).") from None
    if len(data) < 24 or data[:8] != TRACE_MAGIC:
        raise TraceError(f"{path} is not a loss trace (it lacks the GETRACE1 header).")
    packets, drops = struct.unpack("<QQ", data[8:24])
    words = np.frombuffer(data, dtype="<u8", count=(packets + 63) // 64, offset=24) \
        if len(data) >= 24 + 8 * ((packets + 63) // 64) else None
    if words is None:
        raise TraceError(f"the loss trace {path} is cut short.")
    bits = np.unpackbits(words.astype("<u8").view(np.uint8), bitorder="little")[:packets]
    dropped = np.flatnonzero(bits)
    if len(dropped) != drops:
        raise TraceError(f"the loss trace {path} says {drops} drops but holds "
                             f"{len(dropped)}.")
    return LossTrace(int(packets), dropped)


def folder_loss_pct(folder: Path | str) -> float:
    """The share of all positions dropped over every trace in ``folder``, in percent."""
    files = sorted(Path(folder).glob(f"*{TRACE_SUFFIX}"))
    return _loss_pct(str(folder), tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns)
                                        for f in files))


@functools.lru_cache(maxsize=64)
def _loss_pct(folder: str, stamp: tuple) -> float:
    # stamp (the files' names, sizes and times) keys the cache: a rewritten trace is read again.
    traces = [read_trace(Path(folder) / name) for name, _, _ in stamp]
    packets = sum(t.packets for t in traces)
    return 100 * sum(len(t.dropped) for t in traces) / packets if packets else 0.0


def same_positions(a: LossTrace, b: LossTrace) -> bool:
    """Whether ``a`` and ``b`` drop the same positions over the packets both cover."""
    n = min(a.packets, b.packets)
    return np.array_equal(a.dropped[a.dropped < n], b.dropped[b.dropped < n])
