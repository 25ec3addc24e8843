"""The bottleneck's queue: the plain FIFO every scheme gets, or strict priority bands by DSCP.

Mininet shapes the switch port toward the PS with HTB (root ``5:``, class ``5:1`` at the
bottleneck rate); the queue is the qdisc under that class, handle ``10:``. By default it is a
``pfifo`` of ``queue_pkts`` packets, exactly as the testbed has always made it
(:func:`fifo_commands`). A transport that marks its datagrams by importance (``mlt``) asks for
priority bands instead (:class:`transports.base.PriorityBands`, from
:meth:`transports.base.Transport.bottleneck_queue`), and :func:`priority_commands` builds them
from what every kernel here has: no ``prio``, ``skbprio``, ``red`` or ``gred`` qdisc (this kernel
has none of them), only HTB, FIFOs and the ``u32`` classifier::

    5: htb (Mininet) ── 5:1 class at the bottleneck rate (the shaping, unchanged)
                          └── 10: htb default <last band>      (the scheduler)
                                ├── 10:11 class prio 0 ── 11: pfifo_head_drop limit L0
                                ├── 10:12 class prio 1 ── 12: pfifo_head_drop limit L1
                                ...     (u32 filters on 10: send DSCP d_k to 10:1<k+1>)

Every band class has rate and ceil at ten times the bottleneck, so none is ever short of tokens
and the inner HTB never holds a packet back: the outer class ``5:1`` alone sets the pace, and
each time it may send, the inner HTB hands it the head of the highest band with packets (HTB
serves the classes of one level in ``prio`` order). The bands' limits add up to ``queue_pkts``
(:func:`band_limits`), so the buffer is today's, divided. A full band drops its oldest packet
(``pfifo_head_drop``) unless the transport asks for tail drop: a queue that refuses a packet makes
userspace Open vSwitch discard the rest of its send batch uncounted, whatever the bands of those
packets (``docs/mlt.md``), while head drop takes the new packet and reports congestion, not a
drop, to the switch. Unmarked packets (ARP, anything without a band's DSCP) go to the last band.

Switching between the two is per run and idempotent (:class:`BottleneckQueue`): the FIFO is
deleted and the bands' HTB added under ``5:1``, or the reverse; nothing else on the port changes.
The command lines are pure functions, testable without root; :class:`BottleneckQueue` runs them.
"""

from __future__ import annotations

import json

from topologies.testbed.counters import QueueCounters
from topologies.testbed.process import TestbedError, run
from transports.base import PriorityBands, UserError

PARENT = "5:1"          # Mininet's HTB class on the switch port: the bottleneck rate
HANDLE = "10:"          # the queue under it, whatever its kind (counters.parse_qdisc reads it)
MAX_BANDS = 8           # HTB has eight priorities (TC_HTB_NUMPRIO)
FIRST_BAND = 0x11       # band k is class 10:<FIRST_BAND + k> and its FIFO <FIRST_BAND + k>:
BAND_RATE_FACTOR = 10   # band classes' rate and ceil, in bottleneck rates: never short of tokens
QUANTUM_BYTES = 1514    # one full frame; only classes of equal prio share by it (ours never do)


class QueueError(UserError, ValueError):
    """A priority queue that cannot be built as asked."""


def fifo_commands(dev: str, queue_pkts: int) -> list[list[str]]:
    """The plain FIFO of ``queue_pkts`` packets under the port's HTB class: today's queue."""
    return [["tc", "qdisc", "add", "dev", dev, "parent", PARENT, "handle", HANDLE, "pfifo",
             "limit", str(queue_pkts)]]


def clear_commands(dev: str) -> list[list[str]]:
    """Remove the queue under the port's HTB class (a FIFO, or the bands with their filters)."""
    return [["tc", "qdisc", "del", "dev", dev, "parent", PARENT, "handle", HANDLE]]


def check_bands(bands: PriorityBands, queue_pkts: int) -> None:
    """Raise :class:`QueueError` with one sentence if ``bands`` cannot be built over a buffer
    of ``queue_pkts`` packets."""
    n = len(bands.dscp)
    if not 1 <= n <= MAX_BANDS:
        raise QueueError(f"a priority queue has from 1 to {MAX_BANDS} bands, not {n}.")
    if len(bands.shares) != n:
        raise QueueError(f"a priority queue needs one buffer share per band ({n}), "
                         f"not {len(bands.shares)}.")
    if any(not isinstance(d, int) or not 0 <= d <= 63 for d in bands.dscp) \
            or len(set(bands.dscp)) != n:
        raise QueueError(f"each band's DSCP must be a distinct number from 0 to 63, not "
                         f"{list(bands.dscp)}.")
    if any(not s > 0 for s in bands.shares):
        raise QueueError(f"every band's buffer share must be above 0, not {list(bands.shares)}.")
    if queue_pkts < n:
        raise QueueError(f"a queue of {queue_pkts} packets cannot give each of {n} bands "
                         "a packet; raise queue_pkts or use fewer bands.")


def band_limits(queue_pkts: int, shares: tuple[float, ...]) -> list[int]:
    """Each band's packets of a ``queue_pkts`` buffer in proportion to ``shares``, at least one
    each, summing to ``queue_pkts`` exactly: rounded down, then the packets left over go to the
    largest remainders (ties to the higher band), or, if the floor of one packet took too many,
    are taken back from the largest bands."""
    exact = [queue_pkts * s / sum(shares) for s in shares]
    limits = [max(1, int(x)) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda k: (-(exact[k] - int(exact[k])), k))
    for k in by_remainder[:max(0, queue_pkts - sum(limits))]:
        limits[k] += 1
    while sum(limits) > queue_pkts:
        limits[max(range(len(limits)), key=lambda k: (limits[k], -k))] -= 1
    return limits


def band_class(k: int) -> str:
    """Band ``k``'s HTB class under the queue (``10:11`` for band 0)."""
    return f"{HANDLE}{FIRST_BAND + k:x}"


def band_handle(k: int) -> str:
    """Band ``k``'s FIFO (``11:`` for band 0)."""
    return f"{FIRST_BAND + k:x}:"


def priority_commands(dev: str, rate_mbps: float, queue_pkts: int,
                      bands: PriorityBands) -> list[list[str]]:
    """The strict priority bands under the port's HTB class (see the module docstring), in the
    order they must run; the plain FIFO must be gone first (:func:`clear_commands`)."""
    check_bands(bands, queue_pkts)
    n = len(bands.dscp)
    fast = f"{BAND_RATE_FACTOR * rate_mbps:g}mbit"
    fifo = "pfifo_head_drop" if bands.head_drop else "pfifo"
    out = [["tc", "qdisc", "add", "dev", dev, "parent", PARENT, "handle", HANDLE, "htb",
            "default", f"{FIRST_BAND + n - 1:x}"]]
    for k, (dscp, limit) in enumerate(zip(bands.dscp, band_limits(queue_pkts, bands.shares))):
        out += [
            ["tc", "class", "add", "dev", dev, "parent", HANDLE, "classid", band_class(k), "htb",
             "rate", fast, "ceil", fast, "prio", str(k), "quantum", str(QUANTUM_BYTES)],
            ["tc", "qdisc", "add", "dev", dev, "parent", band_class(k), "handle", band_handle(k),
             fifo, "limit", str(limit)],
            ["tc", "filter", "add", "dev", dev, "parent", HANDLE, "protocol", "ip", "prio",
             str(k + 1), "u32", "match", "ip", "dsfield", f"{dscp << 2:#04x}", "0xfc",
             "flowid", band_class(k)],
        ]
    return out


def parse_bands(tc_json: str) -> dict[int, QueueCounters]:
    """Each band's counters (band index -> its FIFO's) from ``tc -s -j qdisc show dev ...``;
    empty when the port has the plain FIFO."""
    out = {}
    for q in json.loads(tc_json):
        parent = q.get("parent", "")
        if q.get("kind", "").startswith("pfifo") and parent.startswith(HANDLE):
            k = int(parent[len(HANDLE):], 16) - FIRST_BAND
            out[k] = QueueCounters(q.get("packets", 0), q.get("bytes", 0), q.get("drops", 0),
                                   q.get("overlimits", 0), q.get("requeues", 0))
    return dict(sorted(out.items()))


class BottleneckQueue:
    """The queue of a running star's bottleneck port (``testbed.queue``): made as a FIFO when
    the network comes up, switched to priority bands and back as runs ask.

    ``testbed`` needs ``params`` (``bottleneck_intf``, ``bottleneck_mbps``, ``queue_pkts``).
    ``applied`` is what the port has now: None for the FIFO, else the bands.
    """

    _UNKNOWN = object()   # a switch failed halfway: the port may have anything under 5:1

    def __init__(self, testbed) -> None:
        self.testbed = testbed
        self.applied: PriorityBands | None | object = None

    def _run(self, commands: list[list[str]]) -> None:
        for argv in commands:
            run(*argv)

    def create(self, dev: str) -> None:
        """Put the plain FIFO on ``dev`` (every queue port, when the network comes up)."""
        self._run(fifo_commands(dev, self.testbed.params.queue_pkts))

    def configure(self, bands: PriorityBands | None) -> None:
        """Give the bottleneck the FIFO (None) or these bands; nothing happens if it has them."""
        if bands == self.applied:
            return
        params = self.testbed.params
        dev = getattr(params, "bottleneck_intf", None)
        if dev is None:
            if bands is None:
                return   # a topology without a PS keeps the FIFOs it was made with
            raise TestbedError(f"{type(params).__name__} has no bottleneck toward a PS, so it "
                               "has no priority queue; run this transport on the incast star.")
        build = (fifo_commands(dev, params.queue_pkts) if bands is None else
                 priority_commands(dev, params.bottleneck_mbps, params.queue_pkts, bands))
        try:
            self._run(clear_commands(dev))
        except TestbedError:
            if self.applied is not self._UNKNOWN:
                raise
            # after a failed switch the queue may already be gone
        self.applied = self._UNKNOWN
        self._run(build)
        self.applied = bands
