"""Measuring a running network: counters, round-trip times, the controller's port statistics.

:class:`Meter` is a running testbed's measurements (``testbed.meter``). The names it reads come
from the topology's parameters: the incast star names its PS, its switch and the bottleneck port
(:class:`~topologies.incast.IncastParams`); a snapshot of a topology without a PS (the fabric)
is refused with a sentence, while :meth:`Meter.switch_ports` and :meth:`Meter.port_stats_between`
serve every topology.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import time

from topologies.testbed.bottleneck import HANDLE
from topologies.testbed.counters import (LossCounters, Snapshot, parse_dump_ports, parse_nstat,
                                         parse_qdisc)
from topologies.testbed.process import TestbedError, run


class MeasureError(TestbedError):
    """A measurement the network cannot give."""


class Meter:
    """The measurements of a running network; ``testbed`` needs ``params``, ``host_names()``,
    ``host_run(host, *args)``, ``ingress`` and ``stats_path`` (a
    :class:`~topologies.testbed.network.Testbed` has them)."""

    def __init__(self, testbed) -> None:
        self.testbed = testbed

    def _star(self):
        params = self.testbed.params
        if not hasattr(params, "ps_ip"):
            raise MeasureError(f"{type(params).__name__} has no PS: a snapshot and an RTT to the "
                               "PS are the incast star's.")
        return params

    def rtt_ms(self, host: str, count: int = 5) -> float:
        """The median of ``count`` application-level RTTs from ``host`` to the PS, on the idle
        network.

        ``ping -U`` times from user space to user space, which counts delay added at the
        pinging host's own ingress (plain ping does not).
        """
        out = self.testbed.host_run(host, "ping", "-U", "-n", "-c", str(count), "-i", "0.02",
                                    "-W", "5", self._star().ps_ip)
        times = [float(t) for t in re.findall(r"time=([\d.]+) ms", out)]
        if not times:
            raise MeasureError(f"ping from {host} to the PS printed no RTT: {out.strip()[-200:]}")
        return statistics.median(times)

    def snapshot(self) -> Snapshot:
        """Every counter a run needs, at this instant (:mod:`topologies.testbed.counters`)."""
        star = self._star()
        ingress = self.testbed.ingress
        # One process per host for every reading: this runs twice per run for every host.
        hosts = {}
        for name in self.testbed.host_names():
            out = self.testbed.host_run(name, "sh", "-c", "nstat -asz --json && echo '@@@' && "
                                        + ingress.counters_command(name))
            hosts[name] = out.split("@@@", 1)
        return Snapshot(
            t=time.time(),
            ports=self.switch_ports(star.switch_name),
            bottleneck=parse_qdisc(run("tc", "-s", "-j", "qdisc", "show", "dev",
                                        star.bottleneck_intf), HANDLE),
            impair={name: LossCounters(**ingress.parse_counters(parts[1]))
                    for name, parts in hosts.items()},
            tcp={name: parse_nstat(parts[0]) for name, parts in hosts.items()},
            ps_port=star.ps_port, worker_ports=tuple(star.worker_ports),
            cross_ports=tuple(star.cross_ports),
        )

    def switch_ports(self, switch: str) -> dict:
        """Switch ``switch``'s per-port counters now (OpenFlow port number -> PortCounters)."""
        return parse_dump_ports(run("ovs-ofctl", "-O", "OpenFlow13", "dump-ports", switch))

    def port_stats_between(self, t0: float, t1: float) -> list[dict]:
        """The controller's port statistics records with ``t0 <= t <= t1``."""
        out = []
        with contextlib.suppress(FileNotFoundError), open(self.testbed.stats_path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # the controller is writing this line right now
                rec = json.loads(line)
                if t0 <= rec["t"] <= t1:
                    out.append(rec)
        return out
