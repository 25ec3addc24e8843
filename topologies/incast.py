"""The incast star: ``n_workers`` workers and one parameter server behind one switch.

::

    w1 ──┐
    w2 ──┤               bottleneck: the switch port toward the PS
    ...  ├── s1 ══════ ps1   (HTB at bottleneck_mbps, pfifo of queue_pkts packets)
    wN ──┘

Hosts are ``w1..wN`` (10.0.0.1..N) and ``ps1`` (10.0.0.254), all in 10.0.0.0/24, with MAC
addresses that end in the same number as the IP; the PS sits on switch port 1 and worker ``wi`` on
port ``i + 1``, so the controller can install forwarding from this data alone. Every link is an
HTB-shaped ``TCLink`` with checksum offload off (userspace Open vSwitch carries no TCP or UDP
otherwise); worker links run at ``worker_link_mbps`` (by default the bottleneck rate), so the PS
link is the single bottleneck in both directions: gradients queue at the switch port toward the
PS, parameters at the PS's own interface.

Random loss (``loss_pct``) and the bottleneck queue length are not Mininet link parameters on this
kernel (no netem); :mod:`topologies.testbed.network` applies them after the network starts.
``loss_pct`` is the probability, in percent, that any IPv4 packet is dropped at the ingress of the
host that receives it. Every host-to-host path crosses exactly one such drop point, so it is the
per-packet, per-direction, end-to-end random loss rate for gradients, parameters and ACKs alike;
congestion drops at the bottleneck queue come on top and are counted separately.

Cross-traffic hosts (``n_cross`` > 0) ``x1..xK`` (10.0.0.200..) sit on the ports after the
workers, with links at the worker rate; whatever they send to the PS crosses the same bottleneck
port as the gradients (:mod:`topologies.impair.cross` runs the traffic).

**Names.** Every host, interface and switch-port name is built here and nowhere else:
:func:`worker_name`, :func:`cross_name`, :func:`intf` (a host's one interface, ``<host>-eth0``),
:func:`switch_intf` (``s1-eth<port>``), :data:`BOTTLENECK_INTF`, and the lists of an
:class:`IncastParams` (``host_names``, ``worker_ports``, ``cross_ports``, ``link_names``).

From the Mininet command line (with a switch and controller of your own)::

    mn --custom topologies/incast.py --topo incast,n_workers=4,bottleneck_mbps=100,n_cross=2 ...
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from mininet.link import TCLink
from mininet.topo import Topo
from transports.base import UserError

PS_NAME = "ps1"
SWITCH_NAME = "s1"
SWITCH_DPID = 1
SUBNET_PREFIX = 24
PS_PORT = 1
PS_IP = "10.0.0.254"
SUBNET = f"10.0.0.0/{SUBNET_PREFIX}"
MAX_WORKERS = 253
CROSS_FIRST_OCTET = 200  # cross hosts are 10.0.0.200.. (workers must stay below)
MAX_CROSS = 53           # 10.0.0.200..252
MAX_LINK_MBPS = 1000.0  # Mininet's HTB ceiling; userspace OVS tops out well below it


def intf(host: str) -> str:
    """A host's one interface (Mininet's naming, port 0 on the host side)."""
    return f"{host}-eth0"


def switch_intf(port: int) -> str:
    """The switch's interface for OpenFlow port ``port``."""
    return f"{SWITCH_NAME}-eth{port}"


BOTTLENECK_INTF = switch_intf(PS_PORT)  # the switch port toward the PS: the bottleneck queue


class TopologyError(UserError, ValueError):
    """A topology parameter is out of range."""


@dataclasses.dataclass(frozen=True)
class StarLinks:
    """The star's hosts and links, as every spec of a run on it names them: ``n_workers``
    workers, the PS's link (the bottleneck) at ``bottleneck_mbps``, each worker's link at
    ``worker_link_mbps`` (None: the bottleneck's rate)."""

    n_workers: int = 8
    bottleneck_mbps: float = 100.0
    worker_link_mbps: float | None = None


@dataclasses.dataclass(frozen=True)
class IncastParams(StarLinks):
    """The parameters of the incast star, validated on construction."""

    queue_pkts: int = 64
    loss_pct: float = 0.0
    n_cross: int = 0

    def __post_init__(self) -> None:
        check_params(self.n_workers, self.bottleneck_mbps, self.worker_link_mbps,
                     self.queue_pkts, self.loss_pct, self.n_cross)

    def topo(self) -> IncastTopo:
        """The Mininet topology (what :class:`topologies.testbed.network.Testbed` builds)."""
        return IncastTopo(**dataclasses.asdict(self))

    @property
    def worker_mbps(self) -> float:
        """The worker links' rate (the bottleneck rate unless set)."""
        return self.bottleneck_mbps if self.worker_link_mbps is None else self.worker_link_mbps

    @property
    def worker_names(self) -> list[str]:
        """``w1..wN`` in rank order."""
        return [worker_name(r) for r in range(self.n_workers)]

    @property
    def cross_names(self) -> list[str]:
        """``x1..xK`` (empty without cross traffic)."""
        return [cross_name(i) for i in range(self.n_cross)]

    @property
    def host_names(self) -> list[str]:
        """The PS first, then the workers in rank order, then the cross-traffic hosts."""
        return [PS_NAME] + self.worker_names + self.cross_names

    @property
    def worker_ports(self) -> list[int]:
        """The switch ports of the workers, in rank order."""
        return [worker_port(r) for r in range(self.n_workers)]

    @property
    def cross_ports(self) -> list[int]:
        """The switch ports of the cross-traffic hosts, in order."""
        return [cross_port(i, self.n_workers) for i in range(self.n_cross)]

    # The names a measurement of the star reads, from the topology (not from constants): every
    # host's subnet, the PS's address (what RTTs are measured to), the star's one switch, and its
    # port toward the PS, whose queue is the bottleneck.
    subnet: ClassVar[str] = SUBNET
    ps_ip: ClassVar[str] = PS_IP
    ps_port: ClassVar[int] = PS_PORT
    switch_name: ClassVar[str] = SWITCH_NAME
    bottleneck_intf: ClassVar[str] = BOTTLENECK_INTF

    def link_names(self) -> list[str]:
        """Every interface of the star, host side and switch side."""
        hosts = [(PS_NAME, PS_PORT)] + list(zip(self.worker_names, self.worker_ports)) \
            + list(zip(self.cross_names, self.cross_ports))
        return [name for host, port in hosts for name in (intf(host), switch_intf(port))]


def check_params(n_workers: int, bottleneck_mbps: float, worker_link_mbps: float | None,
                 queue_pkts: int, loss_pct: float, n_cross: int = 0) -> None:
    """Raise :class:`TopologyError` with a sentence if any parameter is out of range."""
    if not isinstance(n_workers, int) or isinstance(n_workers, bool) or n_workers < 1:
        raise TopologyError(f"n_workers must be a whole number of at least 1, not {n_workers!r}.")
    if n_workers > MAX_WORKERS:
        raise TopologyError(f"n_workers can be at most {MAX_WORKERS} (one /24), not {n_workers}.")
    if not 0 < bottleneck_mbps <= MAX_LINK_MBPS:
        raise TopologyError(
            f"bottleneck_mbps must be above 0 and at most {MAX_LINK_MBPS:g}, not {bottleneck_mbps!r}."
        )
    if worker_link_mbps is not None and not bottleneck_mbps <= worker_link_mbps <= MAX_LINK_MBPS:
        raise TopologyError(
            "worker_link_mbps must be at least bottleneck_mbps (the PS link is the single "
            f"bottleneck) and at most {MAX_LINK_MBPS:g}, not {worker_link_mbps!r}."
        )
    if not isinstance(queue_pkts, int) or isinstance(queue_pkts, bool) or queue_pkts < 1:
        raise TopologyError(f"queue_pkts must be a whole number of at least 1, not {queue_pkts!r}.")
    if not 0 <= loss_pct < 50:
        raise TopologyError(f"loss_pct must be at least 0 and below 50, not {loss_pct!r}.")
    if not isinstance(n_cross, int) or isinstance(n_cross, bool) or not 0 <= n_cross <= MAX_CROSS:
        raise TopologyError(f"n_cross must be a whole number from 0 to {MAX_CROSS}, "
                            f"not {n_cross!r}.")
    if n_cross and n_workers >= CROSS_FIRST_OCTET:
        raise TopologyError(f"with cross traffic n_workers must stay below {CROSS_FIRST_OCTET} "
                            f"(cross hosts use 10.0.0.{CROSS_FIRST_OCTET} and up), "
                            f"not {n_workers}.")


def worker_name(rank: int) -> str:
    """Host name of worker ``rank`` (0-based): ``w1`` for rank 0."""
    return f"w{rank + 1}"


def worker_ip(rank: int) -> str:
    """IPv4 address of worker ``rank`` (0-based)."""
    return f"10.0.0.{rank + 1}"


def cross_name(index: int) -> str:
    """Host name of cross-traffic host ``index`` (0-based): ``x1`` for index 0."""
    return f"x{index + 1}"


def cross_ip(index: int) -> str:
    """IPv4 address of cross-traffic host ``index`` (0-based): 10.0.0.200 and up."""
    return f"10.0.0.{CROSS_FIRST_OCTET + index}"


def cross_port(index: int, n_workers: int) -> int:
    """Switch port of cross-traffic host ``index`` (0-based): the ports after the workers."""
    return n_workers + 2 + index



def mac_for(ip: str) -> str:
    """A MAC address whose last byte is the IP's last octet."""
    return "00:00:00:00:00:%02x" % int(ip.rsplit(".", 1)[1])


def worker_port(rank: int) -> int:
    """Switch port of worker ``rank`` (0-based)."""
    return rank + 2


class IncastTopo(Topo):
    """``n_workers`` workers and one PS on one switch; see the module docstring."""

    def build(self, n_workers: int = 8, bottleneck_mbps: float = 100.0,
              worker_link_mbps: float | None = None, queue_pkts: int = 64,
              loss_pct: float = 0.0, n_cross: int = 0) -> None:
        self.params = IncastParams(n_workers, float(bottleneck_mbps),
                                   None if worker_link_mbps is None else float(worker_link_mbps),
                                   queue_pkts, float(loss_pct), n_cross)
        switch = self.addSwitch(SWITCH_NAME, dpid="%016x" % SWITCH_DPID)
        ps = self.addHost(PS_NAME, ip=f"{PS_IP}/{SUBNET_PREFIX}", mac=mac_for(PS_IP))
        self.addLink(ps, switch, port1=0, port2=PS_PORT, cls=TCLink,
                     bw=self.params.bottleneck_mbps, txo=False, rxo=False)
        for rank in range(n_workers):
            ip = worker_ip(rank)
            host = self.addHost(worker_name(rank), ip=f"{ip}/{SUBNET_PREFIX}", mac=mac_for(ip))
            self.addLink(host, switch, port1=0, port2=worker_port(rank), cls=TCLink,
                         bw=self.params.worker_mbps, txo=False, rxo=False)
        for index in range(n_cross):
            ip = cross_ip(index)
            host = self.addHost(cross_name(index), ip=f"{ip}/{SUBNET_PREFIX}", mac=mac_for(ip))
            self.addLink(host, switch, port1=0, port2=cross_port(index, n_workers), cls=TCLink,
                         bw=self.params.worker_mbps, txo=False, rxo=False)

    def forwarding_table(self) -> list[dict]:
        """One entry per host (name, ip, mac, switch port): what the controller installs."""
        entries = [{"host": PS_NAME, "ip": PS_IP, "mac": mac_for(PS_IP), "port": PS_PORT}]
        for rank in range(self.params.n_workers):
            ip = worker_ip(rank)
            entries.append({"host": worker_name(rank), "ip": ip, "mac": mac_for(ip),
                            "port": worker_port(rank)})
        for index in range(self.params.n_cross):
            ip = cross_ip(index)
            entries.append({"host": cross_name(index), "ip": ip, "mac": mac_for(ip),
                            "port": cross_port(index, self.params.n_workers)})
        return entries

    def switch_tables(self) -> dict[str, dict]:
        """The one switch, its dpid and its forwarding table."""
        return {SWITCH_NAME: {"dpid": SWITCH_DPID, "hosts": self.forwarding_table()}}

    def queue_intfs(self) -> list[str]:
        """The switch ports that get the pfifo of ``queue_pkts``: the bottleneck only."""
        return [BOTTLENECK_INTF]


topos = {"incast": IncastTopo}
