"""The leaf-spine fabric: workers on leaf switches, one spine, a shared oversubscribed core.

::

                         sp1                    spine (dpid 0x100); port i goes to leaf li
              ┌──────────┼──────────┐
              l1         l2   ...   lK          leaves (dpid i); port 1 is the uplink
            ┌─┼──┐     ┌─┼──┐
           w1 w2 x1   w3 w4 x2                  workers (ports 2..), cross hosts after them

A topology in which the choice of multicast receivers matters (issue 15, SELMCAST): access links
are heterogeneous (``n_slow`` workers, or any worker by ``worker_mbps``, at a fraction of the
others' rate) and every leaf reaches the others through one uplink of ``uplink_mbps``, shared by
all of its workers (the oversubscription, :attr:`FabricParams.oversubscription`, is the sum of a
leaf's access rates over its uplink rate). One spine keeps the fabric a tree: between any two
hosts there is exactly one path, so forwarding by destination MAC needs no routing decisions and
a multicast tree is the union of the paths to its receivers.

Workers ``w1..wN`` fill the leaves in rank order, ``workers_per_leaf`` each (``wi`` has 10.0.0.i,
as in the incast star); there is no parameter server. With ``cross_per_leaf`` > 0 each leaf also
has that many cross-traffic hosts (``x1..``, 10.0.0.200 and up, leaf by leaf) on links at the
uplink rate, so one of them can fill its leaf's uplink, or another leaf's downlink, with background
traffic. Every link is an HTB-shaped ``TCLink`` with checksum offload off, and
:mod:`topologies.testbed.network` puts a pfifo of ``queue_pkts`` packets under HTB on every switch
port (each is some link's egress queue). Loss (``loss_pct``) works as in the incast star: at each
receiving host's ingress.

**Names and wiring.** Host names and addresses come from :mod:`topologies.incast` (one owner);
switch names, dpids and port numbers are built here and nowhere else. :meth:`FabricTopo.wiring`
describes the whole fabric as data (switches, hosts with their port and rate, trunks between
switches with their rate), which the controller's multicast app
(:mod:`topologies.controller.mcast_app`) reads to know the topology, and
:meth:`FabricTopo.switch_tables` gives each switch its forwarding table (a host on the leaf: its
port; any other host: the uplink; at the spine: the port of the host's leaf).

From the Mininet command line (with a switch and controller of your own)::

    mn --custom topologies/fabric.py --topo fabric,n_leaves=2,workers_per_leaf=3,n_slow=1 ...

or, with the project's switch, controller and cleanup, :class:`topologies.testbed.network.Testbed`
with a :class:`FabricParams`.
"""

from __future__ import annotations

import dataclasses

from mininet.link import TCLink
from mininet.topo import Topo

from topologies.incast import (CROSS_FIRST_OCTET, MAX_LINK_MBPS, SUBNET, SUBNET_PREFIX,
                               TopologyError, cross_ip, cross_name, intf, mac_for, worker_ip,
                               worker_name)

SPINE_NAME = "sp1"
SPINE_DPID = 0x100
UPLINK_PORT = 1          # on every leaf
MAX_LEAVES = 16
MAX_CROSS_PER_LEAF = 4


@dataclasses.dataclass(frozen=True)
class FabricParams:
    """The parameters of the leaf-spine fabric, validated on construction.

    ``worker_mbps`` gives every worker's access rate in rank order; without it every worker runs
    at ``access_mbps`` except the last ``n_slow`` ranks, which run at ``slow_frac`` of it.
    ``uplink_mbps`` (default ``access_mbps``) is each leaf-spine link's rate, both directions.
    """

    n_leaves: int = 2
    workers_per_leaf: int = 3
    access_mbps: float = 100.0
    uplink_mbps: float | None = None
    n_slow: int = 0
    slow_frac: float = 0.25
    worker_mbps: tuple[float, ...] | None = None
    cross_per_leaf: int = 0
    queue_pkts: int = 64
    loss_pct: float = 0.0

    def __post_init__(self) -> None:
        if self.worker_mbps is not None:
            object.__setattr__(self, "worker_mbps", tuple(float(r) for r in self.worker_mbps))
        _check(self)

    def topo(self) -> FabricTopo:
        """The Mininet topology (what :class:`topologies.testbed.network.Testbed` builds)."""
        return FabricTopo(**dataclasses.asdict(self))

    @property
    def n_workers(self) -> int:
        """All workers, on all leaves."""
        return self.n_leaves * self.workers_per_leaf

    @property
    def uplink_rate_mbps(self) -> float:
        """Each leaf-spine link's rate."""
        return self.access_mbps if self.uplink_mbps is None else float(self.uplink_mbps)

    @property
    def worker_rates_mbps(self) -> list[float]:
        """Every worker's access rate, in rank order."""
        if self.worker_mbps is not None:
            return list(self.worker_mbps)
        fast = self.n_workers - self.n_slow
        return [self.access_mbps if r < fast else self.access_mbps * self.slow_frac
                for r in range(self.n_workers)]

    @property
    def oversubscription(self) -> float:
        """The largest ratio, over the leaves, of the workers' access rates to the uplink."""
        rates = self.worker_rates_mbps
        k = self.workers_per_leaf
        return max(sum(rates[i * k:(i + 1) * k]) for i in range(self.n_leaves)) \
            / self.uplink_rate_mbps

    @property
    def worker_names(self) -> list[str]:
        """``w1..wN`` in rank order."""
        return [worker_name(r) for r in range(self.n_workers)]

    @property
    def cross_names(self) -> list[str]:
        """``x1..`` leaf by leaf (empty without cross hosts)."""
        return [cross_name(i) for i in range(self.n_leaves * self.cross_per_leaf)]

    @property
    def host_names(self) -> list[str]:
        """The workers in rank order, then the cross-traffic hosts."""
        return self.worker_names + self.cross_names

    @property
    def switch_names(self) -> list[str]:
        """The leaves in order, then the spine."""
        return [leaf_name(i) for i in range(self.n_leaves)] + [SPINE_NAME]

    def leaf_of(self, host: str) -> int:
        """The (0-based) leaf a worker or cross host sits on."""
        return self.attachment(host)[0]

    def attachment(self, host: str) -> tuple[int, int]:
        """(leaf index, leaf port) of a worker or cross host."""
        if host in self.worker_names:
            rank = self.worker_names.index(host)
            return rank // self.workers_per_leaf, 2 + rank % self.workers_per_leaf
        if host in self.cross_names:
            index = self.cross_names.index(host)
            return (index // self.cross_per_leaf,
                    2 + self.workers_per_leaf + index % self.cross_per_leaf)
        raise TopologyError(f"there is no host {host!r} in this fabric; the hosts are "
                            f"{', '.join(self.host_names)}.")

    @property
    def subnet(self) -> str:
        """Every host's subnet (the star's: one /24)."""
        return SUBNET

    def link_names(self) -> list[str]:
        """Every interface of the fabric: host side and leaf side of each access link, both
        ends of each uplink."""
        names = []
        for host in self.host_names:
            leaf, port = self.attachment(host)
            names += [intf(host), switch_intf(leaf_name(leaf), port)]
        for leaf in range(self.n_leaves):
            names += [switch_intf(leaf_name(leaf), UPLINK_PORT),
                      switch_intf(SPINE_NAME, spine_port(leaf))]
        return names

    def queue_intfs(self) -> list[str]:
        """Every switch-side interface: each is the egress queue of one link direction."""
        return [n for n in self.link_names() if n.split("-")[0] in self.switch_names]


def _whole(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TopologyError(f"{name} must be a whole number from {low} to {high}, not {value!r}.")


def _rate(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value <= MAX_LINK_MBPS:
        raise TopologyError(f"{name} must be above 0 and at most {MAX_LINK_MBPS:g} Mbit/s, "
                            f"not {value!r}.")


def _check(p: FabricParams) -> None:
    """Raise :class:`TopologyError` with a sentence if any parameter is out of range."""
    _whole("n_leaves", p.n_leaves, 1, MAX_LEAVES)
    _whole("workers_per_leaf", p.workers_per_leaf, 1, CROSS_FIRST_OCTET - 1)
    if p.n_workers >= CROSS_FIRST_OCTET:
        raise TopologyError(f"the fabric holds at most {CROSS_FIRST_OCTET - 1} workers "
                            f"(cross hosts use 10.0.0.{CROSS_FIRST_OCTET} and up), "
                            f"not {p.n_workers}.")
    _rate("access_mbps", p.access_mbps)
    if p.uplink_mbps is not None:
        _rate("uplink_mbps", p.uplink_mbps)
    _whole("n_slow", p.n_slow, 0, p.n_workers)
    if isinstance(p.slow_frac, bool) or not isinstance(p.slow_frac, (int, float)) \
            or not 0 < p.slow_frac <= 1:
        raise TopologyError(f"slow_frac must be above 0 and at most 1, not {p.slow_frac!r}.")
    if p.worker_mbps is not None:
        if p.n_slow:
            raise TopologyError("give either worker_mbps or n_slow, not both.")
        if len(p.worker_mbps) != p.n_workers:
            raise TopologyError(f"worker_mbps needs one rate per worker ({p.n_workers}), "
                                f"not {len(p.worker_mbps)}.")
        for rate in p.worker_mbps:
            _rate("every rate in worker_mbps", rate)
    else:
        _rate("access_mbps * slow_frac", p.access_mbps * p.slow_frac)
    _whole("cross_per_leaf", p.cross_per_leaf, 0, MAX_CROSS_PER_LEAF)
    _whole("queue_pkts", p.queue_pkts, 1, 10000)
    if isinstance(p.loss_pct, bool) or not isinstance(p.loss_pct, (int, float)) \
            or not 0 <= p.loss_pct < 50:
        raise TopologyError(f"loss_pct must be at least 0 and below 50, not {p.loss_pct!r}.")


def leaf_name(index: int) -> str:
    """Switch name of leaf ``index`` (0-based): ``l1`` for index 0."""
    return f"l{index + 1}"


def leaf_dpid(index: int) -> int:
    """Datapath id of leaf ``index`` (0-based)."""
    return index + 1


def spine_port(leaf: int) -> int:
    """The spine's port toward leaf ``leaf`` (0-based)."""
    return leaf + 1


def switch_intf(switch: str, port: int) -> str:
    """A switch's interface for OpenFlow port ``port`` (Mininet's naming)."""
    return f"{switch}-eth{port}"


def _host_ip(p: FabricParams, host: str) -> str:
    if host in p.worker_names:
        return worker_ip(p.worker_names.index(host))
    return cross_ip(p.cross_names.index(host))


class FabricTopo(Topo):
    """Leaves of workers under one spine; see the module docstring."""

    def build(self, n_leaves: int = 2, workers_per_leaf: int = 3, access_mbps: float = 100.0,
              uplink_mbps: float | None = None, n_slow: int = 0, slow_frac: float = 0.25,
              worker_mbps: tuple[float, ...] | None = None, cross_per_leaf: int = 0,
              queue_pkts: int = 64, loss_pct: float = 0.0) -> None:
        self.params = p = FabricParams(n_leaves, workers_per_leaf, float(access_mbps),
                                       None if uplink_mbps is None else float(uplink_mbps),
                                       n_slow, float(slow_frac), worker_mbps, cross_per_leaf,
                                       queue_pkts, float(loss_pct))
        spine = self.addSwitch(SPINE_NAME, dpid="%016x" % SPINE_DPID)
        leaves = [self.addSwitch(leaf_name(i), dpid="%016x" % leaf_dpid(i))
                  for i in range(n_leaves)]
        for i, leaf in enumerate(leaves):
            self.addLink(leaf, spine, port1=UPLINK_PORT, port2=spine_port(i), cls=TCLink,
                         bw=p.uplink_rate_mbps, txo=False, rxo=False)
        for host, rate in self._host_rates():
            ip = _host_ip(p, host)
            leaf, port = p.attachment(host)
            self.addHost(host, ip=f"{ip}/{SUBNET_PREFIX}", mac=mac_for(ip))
            self.addLink(host, leaves[leaf], port1=0, port2=port, cls=TCLink, bw=rate,
                         txo=False, rxo=False)

    def _host_rates(self) -> list[tuple[str, float]]:
        p = self.params
        return list(zip(p.worker_names, p.worker_rates_mbps)) \
            + [(x, p.uplink_rate_mbps) for x in p.cross_names]

    def forwarding_table(self) -> list[dict]:
        """One entry per host (name, ip, mac, and its port on its own leaf)."""
        p = self.params
        out = []
        for host in p.host_names:
            ip = _host_ip(p, host)
            out.append({"host": host, "ip": ip, "mac": mac_for(ip), "port": p.attachment(host)[1]})
        return out

    def switch_tables(self) -> dict[str, dict]:
        """Per switch: its dpid and one forwarding entry per host (``attached`` where the host's
        own port is)."""
        p = self.params
        tables = {leaf_name(i): {"dpid": leaf_dpid(i), "hosts": []} for i in range(p.n_leaves)}
        tables[SPINE_NAME] = {"dpid": SPINE_DPID, "hosts": []}
        for entry in self.forwarding_table():
            home = p.leaf_of(entry["host"])
            for i in range(p.n_leaves):
                local = i == home
                tables[leaf_name(i)]["hosts"].append(
                    {**entry, "port": entry["port"] if local else UPLINK_PORT, "attached": local})
            tables[SPINE_NAME]["hosts"].append({**entry, "port": spine_port(home),
                                                "attached": False})
        return tables

    def queue_intfs(self) -> list[str]:
        """Every switch-side interface (see :meth:`FabricParams.queue_intfs`)."""
        return self.params.queue_intfs()

    def wiring(self) -> dict:
        """The fabric as data for the controller: switches (name: dpid), hosts (ip, mac, switch,
        port, access rate), trunks (both ends and their ports, rate) and the workers' names."""
        p = self.params
        hosts = {}
        for (host, rate), entry in zip(self._host_rates(), self.forwarding_table()):
            hosts[host] = {"ip": entry["ip"], "mac": entry["mac"],
                           "switch": leaf_name(p.leaf_of(host)), "port": entry["port"],
                           "mbps": rate}
        trunks = [{"a": leaf_name(i), "a_port": UPLINK_PORT, "b": SPINE_NAME,
                   "b_port": spine_port(i), "mbps": p.uplink_rate_mbps}
                  for i in range(p.n_leaves)]
        switches = {name: table["dpid"] for name, table in self.switch_tables().items()}
        return {"switches": switches, "hosts": hosts, "trunks": trunks,
                "workers": p.worker_names}


topos = {"fabric": FabricTopo}
