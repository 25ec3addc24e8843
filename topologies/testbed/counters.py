"""The testbed's counters as typed values: one :class:`Snapshot` per instant, a :class:`Delta`
per run.

:meth:`topologies.testbed.network.Testbed.snapshot` reads, in one go, the switch's per-port counters
(``ovs-ofctl dump-ports``), the bottleneck pfifo's (``tc -s``), every host's loss counters (the
nftables ``arrived``/``dropped`` counters, plus, under Gilbert-Elliott loss, the eBPF chain's
``bursts``, and under the time-based chain its bad periods and their durations) and every host's
kernel TCP/UDP counters (``nstat``). ``after.delta(before)`` turns two snapshots into the figures
of a run:

- ``arrived_packets``, ``random_drops``, ``measured_loss_pct``: IPv4 packets that reached any
  host's ingress, those the loss model dropped, and their ratio (the loss actually applied);
- ``loss_bursts``, ``mean_burst_pkts``: runs of consecutive drops at one host's ingress, and
  drops per run (``None`` under uniform loss, whose rules count no runs);
- ``bad_periods``, ``mean_bad_ms``: bad periods the time-based chains began, all hosts, and
  their mean duration as drawn (``None`` unless some host runs a time-based chain);
- ``queue_drops``: packets the switch received on all its ports minus packets it sent on all
  of them: what its queues dropped, wherever the traffic went (toward the PS under the ``ps``
  pattern, between workers under a tree or a ring). Exact for unicast traffic; a broadcast (an
  ARP request) counts once in and several times out, so the count is floored at 0. The
  bottleneck pfifo's own counter, ``queue_drops_tc``, misses drops under userspace OVS;
- ``bottleneck_tx_bytes``: bytes the switch sent toward the PS;
- ``cross_tx_bytes``: bytes the cross-traffic hosts sent into the switch (their ports' receive
  counters), i.e. what the background traffic offered to the bottleneck;
- ``tcp_retransmits``: kernel TCP retransmissions on all hosts.

A snapshot knows which switch ports are the PS's, the workers' and the cross hosts', so a delta
needs nothing else. :meth:`Snapshot.to_dict` / :meth:`Snapshot.from_dict` keep ``counters.json``
readable and round-trip it.
"""

from __future__ import annotations

import dataclasses
import json
import re


class CounterError(RuntimeError):
    """A counter could not be read or parsed."""


@dataclasses.dataclass(frozen=True)
class PortCounters:
    """One switch port's counters, as OpenFlow reports them (rx = from the host)."""

    rx_packets: int = 0
    rx_bytes: int = 0
    rx_dropped: int = 0
    rx_errors: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0
    tx_dropped: int = 0
    tx_errors: int = 0


@dataclasses.dataclass(frozen=True)
class QueueCounters:
    """A queue's counters (the bottleneck's, or one priority band's)."""

    sent_packets: int = 0
    sent_bytes: int = 0
    drops: int = 0
    overlimits: int = 0
    requeues: int = 0


@dataclasses.dataclass(frozen=True)
class LossCounters:
    """One host's ingress loss counters: IPv4 packets arrived and dropped (nftables), runs of
    consecutive drops (the Gilbert-Elliott program; ``None`` when no program counts them), and
    the bad periods the time-based chain began with their summed durations (``None`` unless
    the host runs that chain)."""

    arrived: int = 0
    dropped: int = 0
    bursts: int | None = None
    bad_periods: int | None = None
    bad_ns: int | None = None


@dataclasses.dataclass(frozen=True)
class Delta:
    """The figures of one run, from two snapshots (see the module docstring)."""

    arrived_packets: int
    random_drops: int
    measured_loss_pct: float
    loss_bursts: int | None
    mean_burst_pkts: float | None
    bad_periods: int | None
    mean_bad_ms: float | None
    queue_drops: int
    queue_drops_tc: int
    bottleneck_tx_bytes: int
    cross_tx_bytes: int
    tcp_retransmits: int

    def as_dict(self) -> dict:
        """The figures by name."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Every counter a run needs, at time ``t`` (seconds since the epoch)."""

    t: float
    ports: dict[int, PortCounters]
    bottleneck: QueueCounters
    impair: dict[str, LossCounters]
    tcp: dict[str, dict[str, int]]
    ps_port: int
    worker_ports: tuple[int, ...]
    cross_ports: tuple[int, ...] = ()

    def delta(self, before: Snapshot) -> Delta:
        """The figures of the interval from ``before`` to this snapshot."""
        arrived = sum(c.arrived - before.impair[h].arrived for h, c in self.impair.items())
        dropped = sum(c.dropped - before.impair[h].dropped for h, c in self.impair.items())
        bursts = self._loss_sum("bursts", before)
        bad_periods = self._loss_sum("bad_periods", before)
        bad_ns = self._loss_sum("bad_ns", before)

        def port(name: str, ports) -> int:
            return sum(getattr(self.ports[p], name) - getattr(before.ports[p], name) for p in ports)

        retrans = sum(c.get("TcpRetransSegs", 0) - before.tcp[h].get("TcpRetransSegs", 0)
                      for h, c in self.tcp.items())
        return Delta(
            arrived_packets=arrived,
            random_drops=dropped,
            measured_loss_pct=100.0 * dropped / arrived if arrived else 0.0,
            loss_bursts=bursts,
            mean_burst_pkts=dropped / bursts if bursts else None,
            bad_periods=bad_periods,
            mean_bad_ms=bad_ns / bad_periods / 1e6 if bad_periods else None,
            queue_drops=max(0, port("rx_packets", list(self.ports))
                            - port("tx_packets", list(self.ports))),
            queue_drops_tc=self.bottleneck.drops - before.bottleneck.drops,
            bottleneck_tx_bytes=port("tx_bytes", [self.ps_port]),
            cross_tx_bytes=port("rx_bytes", self.cross_ports),
            tcp_retransmits=retrans,
        )

    def _loss_sum(self, name: str, before: Snapshot) -> int | None:
        """The increase of a loss counter over the hosts that count it at both ends (``None``
        if none does)."""
        counted = [(getattr(c, name), getattr(before.impair[h], name))
                   for h, c in self.impair.items()]
        counted = [(a, b) for a, b in counted if a is not None and b is not None]
        return sum(a - b for a, b in counted) if counted else None

    def to_dict(self) -> dict:
        """JSON-ready (port numbers become strings as JSON keys do)."""
        return {
            "t": self.t,
            "ports": {str(p): dataclasses.asdict(c) for p, c in self.ports.items()},
            "bottleneck": dataclasses.asdict(self.bottleneck),
            "impair": {h: dataclasses.asdict(c) for h, c in self.impair.items()},
            "tcp": self.tcp,
            "ps_port": self.ps_port,
            "worker_ports": list(self.worker_ports),
            "cross_ports": list(self.cross_ports),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Snapshot:
        """The snapshot :meth:`to_dict` wrote."""
        return cls(t=d["t"], ports={int(p): PortCounters(**c) for p, c in d["ports"].items()},
                   bottleneck=QueueCounters(**d["bottleneck"]),
                   impair={h: LossCounters(**c) for h, c in d["impair"].items()},
                   tcp=d["tcp"], ps_port=d["ps_port"], worker_ports=tuple(d["worker_ports"]),
                   cross_ports=tuple(d.get("cross_ports", ())))


# ---- parsers of the tools' outputs -------------------------------------------------------------

_PORT_RE = re.compile(r"port\s+(\d+|LOCAL):\s*rx pkts=(\d+), bytes=(\d+), drop=(\d+), errs=(\d+)"
                      r".*?tx pkts=(\d+), bytes=(\d+), drop=(\d+), errs=(\d+)", re.S)


def parse_dump_ports(text: str) -> dict[int, PortCounters]:
    """Per-port counters from ``ovs-ofctl dump-ports`` (the LOCAL port is left out)."""
    out = {}
    for m in _PORT_RE.finditer(text):
        if m.group(1) == "LOCAL":
            continue
        out[int(m.group(1))] = PortCounters(*(int(v) for v in m.groups()[1:]))
    return out


def parse_qdisc(tc_json: str, handle: str | None = None) -> QueueCounters:
    """The bottleneck queue's counters from ``tc -s -j qdisc show dev ...``: the qdisc with
    ``handle`` (the FIFO, or the priority bands' scheduler, which counts what all its bands sent
    and dropped: :mod:`topologies.testbed.bottleneck`), else the first pfifo."""
    qdiscs = json.loads(tc_json)
    for q in ([q for q in qdiscs if q.get("handle") == handle] if handle else []) + \
            [q for q in qdiscs if q.get("kind") == "pfifo"]:
        return QueueCounters(q["packets"], q["bytes"], q["drops"], q.get("overlimits", 0),
                             q.get("requeues", 0))
    raise CounterError("the bottleneck queue is missing from the switch port toward the PS.")


def parse_nstat(nstat_json: str) -> dict[str, int]:
    """Absolute kernel counters from ``nstat -as --json`` (TCP and UDP ones)."""
    data = json.loads(nstat_json)
    counters = data.get("kernel", data)
    return {k: int(v) for k, v in counters.items() if k.startswith(("Tcp", "Udp"))}
