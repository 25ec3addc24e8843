"""The controller's global view of a tree network: its directed links, their paths, their load.

Pure data and arithmetic, no OpenFlow (the os-ken app :mod:`topologies.controller.mcast_app` feeds
it), so it is tested on synthetic counters. Two parts:

:class:`Wiring` reads a topology's wiring (``FabricTopo.wiring()`` in :mod:`topologies.fabric`:
switches with their dpids, hosts with their switch, port and access rate, trunks between
switches) into a graph of **directed links**, one per direction of every cable, each named
``"<from>><to>"`` (``"l1>sp1"``, ``"w3>l2"``), with its capacity and the switch counter that
measures it: a link leaving a switch by the transmit bytes of that port, a link from a host into
its switch by the receive bytes of the host's port. :meth:`Wiring.path` is the one path between
two hosts (the wiring is a tree), as links and as forwarding hops.

:class:`LinkMeter` turns successive port statistics into a rate per directed link: the bytes
counted over the last ``window_s`` seconds (at least two polls), in Mbit/s of Ethernet frames
(what HTB shapes). A link with fewer than two samples counts as idle. **Available bandwidth** of
a link is its capacity minus that rate, but never below ``floor_frac`` of its capacity: a link
that background traffic fills is slow for a new flow, not closed to it (the new flow takes a
share), and a positive floor keeps every estimate finite.
"""

from __future__ import annotations

import collections
import dataclasses


class WiringError(ValueError):
    """A wiring description is inconsistent, or names a host it does not have."""


@dataclasses.dataclass(frozen=True)
class Link:
    """One direction of a cable: ``src`` to ``dst``, measured at (``dpid``, ``port``) by its
    ``counter`` (``"tx_bytes"`` or ``"rx_bytes"``)."""

    name: str
    src: str
    dst: str
    capacity_mbps: float
    dpid: int
    port: int
    counter: str


@dataclasses.dataclass(frozen=True)
class Hop:
    """One forwarding step on a path: ``switch`` sends out of ``port`` toward ``next``."""

    switch: str
    port: int
    next: str


class Wiring:
    """A tree network as a graph of directed links (see the module docstring)."""

    def __init__(self, wiring: dict) -> None:
        self.switches: dict[str, int] = dict(wiring["switches"])
        self.hosts: dict[str, dict] = dict(wiring["hosts"])
        self.workers: list[str] = list(wiring.get("workers", self.hosts))
        self.links: dict[str, Link] = {}
        # node -> {neighbour: the local port toward it (None on a host)}
        self._ports: dict[str, dict[str, int | None]] = collections.defaultdict(dict)
        for host, h in self.hosts.items():
            if h["switch"] not in self.switches:
                raise WiringError(f"host {host} sits on unknown switch {h['switch']!r}.")
            dpid = self.switches[h["switch"]]
            self._add(host, h["switch"], h["mbps"], dpid, h["port"], "rx_bytes", None, h["port"])
            self._add(h["switch"], host, h["mbps"], dpid, h["port"], "tx_bytes", h["port"], None)
        for t in wiring.get("trunks", []):
            a, b = t["a"], t["b"]
            self._add(a, b, t["mbps"], self.switches[a], t["a_port"], "tx_bytes",
                      t["a_port"], t["b_port"])
            self._add(b, a, t["mbps"], self.switches[b], t["b_port"], "tx_bytes",
                      t["b_port"], t["a_port"])
        self.dpid_names = {dpid: name for name, dpid in self.switches.items()}

    def _add(self, src: str, dst: str, mbps: float, dpid: int, port: int, counter: str,
             src_port: int | None, dst_port: int | None) -> None:
        name = link_name(src, dst)
        self.links[name] = Link(name, src, dst, float(mbps), int(dpid), int(port), counter)
        self._ports[src][dst] = src_port
        self._ports[dst][src] = dst_port

    def check_host(self, host: str) -> dict:
        """The wiring entry of ``host``; raise :class:`WiringError` with a sentence if unknown."""
        if host not in self.hosts:
            raise WiringError(f"no host named {host!r} in this topology; the workers are "
                              f"{', '.join(self.workers)}.")
        return self.hosts[host]

    def nodes_between(self, src: str, dst: str) -> list[str]:
        """The nodes on the one path from ``src`` to ``dst``, both ends included."""
        self.check_host(src)
        self.check_host(dst)
        before = {src: None}
        todo = collections.deque([src])
        while todo:
            node = todo.popleft()
            if node == dst:
                break
            for nxt in self._ports[node]:
                # Hosts are leaves of the tree: a path never passes through one.
                if nxt not in before and (nxt == dst or nxt in self.switches):
                    before[nxt] = node
                    todo.append(nxt)
        if dst not in before:
            raise WiringError(f"no path from {src} to {dst} in this wiring.")
        nodes = [dst]
        while nodes[-1] != src:
            nodes.append(before[nodes[-1]])
        return nodes[::-1]

    def path(self, src: str, dst: str) -> list[str]:
        """The directed links from host ``src`` to host ``dst``, in order."""
        nodes = self.nodes_between(src, dst)
        return [link_name(a, b) for a, b in zip(nodes, nodes[1:])]

    def hops(self, src: str, dst: str) -> list[Hop]:
        """The forwarding steps (switch, out port, next node) from host ``src`` to ``dst``."""
        nodes = self.nodes_between(src, dst)
        return [Hop(a, self._ports[a][b], b) for a, b in zip(nodes[1:], nodes[2:])]


def link_name(src: str, dst: str) -> str:
    """The name of the directed link from ``src`` to ``dst``."""
    return f"{src}>{dst}"


@dataclasses.dataclass(frozen=True)
class LinkState:
    """What the view says about one directed link now."""

    capacity_mbps: float
    measured_mbps: float
    available_mbps: float
    own_mbps: float = 0.0
    """The part of the measured rate that the controller's own plans put there (peer-to-peer
    training it scheduled, :meth:`LinkMeter.planned`); not counted against the link."""

    @property
    def utilisation_frac(self) -> float:
        """Measured rate over capacity."""
        return self.measured_mbps / self.capacity_mbps


@dataclasses.dataclass
class _Transfer:
    """One transfer the controller planned: when it began, when it was over, its bytes per link."""

    start: float
    end: float | None
    link_bytes: dict[str, float]


class LinkMeter:
    """Per-link rates from successive port statistics (see the module docstring)."""

    def __init__(self, wiring: Wiring, window_s: float = 1.0, floor_frac: float = 0.05) -> None:
        if not window_s > 0 or not 0 < floor_frac <= 1:
            raise ValueError("window_s must be above 0 and floor_frac in (0, 1].")
        self.wiring = wiring
        self.window_s = window_s
        self.floor_frac = floor_frac
        self._samples: dict[tuple[int, int], collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=256))
        self._own: dict[int, _Transfer] = {}   # by handle, oldest first
        self._next_handle = 0

    def start_transfer(self, t: float, link_bytes: dict[str, float]) -> int:
        """Record that a transfer the controller planned itself (peer-to-peer training) puts
        ``link_bytes`` on these links from ``t`` (monotonic seconds) on; returns its handle for
        :meth:`end_transfer`. :meth:`state` takes such traffic out of the measured rate, so only
        other traffic counts against a link."""
        horizon = t - 10 * self.window_s   # transfers long over no longer matter
        for handle in [h for h, tr in self._own.items() if tr.end is not None and tr.end < horizon]:
            del self._own[handle]
        self._next_handle += 1
        self._own[self._next_handle] = _Transfer(t, None, dict(link_bytes))
        return self._next_handle

    def end_transfer(self, handle: int, t: float) -> None:
        """The transfer ``handle`` was over by ``t`` (an unknown or ended one: nothing)."""
        tr = self._own.get(handle)
        if tr is not None and tr.end is None:
            tr.end = max(t, tr.start)

    def _own_mbps(self, name: str, t0: float, t1: float) -> float:
        """The controller's own transfers' rate on link ``name`` over ``[t0, t1]``: each one's
        bytes spread evenly over its time (a running one's: until ``t1``)."""
        if t1 <= t0:
            return 0.0
        total = 0.0
        for tr in self._own.values():
            b = tr.link_bytes.get(name)
            stop = tr.end if tr.end is not None else t1
            if not b or stop <= t0 or tr.start >= t1:
                continue
            total += b if stop <= tr.start else \
                b * (min(stop, t1) - max(tr.start, t0)) / (stop - tr.start)
        return total * 8 / (t1 - t0) / 1e6

    def _span(self, link: Link) -> tuple[tuple, tuple] | None:
        """The first and last samples of the link's counter within ``window_s`` (None with
        fewer than two samples)."""
        samples = self._samples.get((link.dpid, link.port))
        if not samples or len(samples) < 2:
            return None
        last, first = samples[-1], samples[-2]
        for s in reversed(list(samples)[:-2]):
            if last[0] - s[0] > self.window_s:
                break
            first = s
        return first, last

    def observe(self, dpid: int, port: int, t: float, rx_bytes: int, tx_bytes: int) -> None:
        """Record one port's counters at time ``t`` (seconds)."""
        samples = self._samples[(dpid, port)]
        if samples and t <= samples[-1][0]:
            return  # a reply older than one already seen
        samples.append((t, rx_bytes, tx_bytes))

    def rate_mbps(self, link: Link) -> float:
        """The link's rate over the last ``window_s`` seconds (0 with fewer than two samples)."""
        span = self._span(link)
        if span is None:
            return 0.0
        first, last = span
        index = 1 if link.counter == "rx_bytes" else 2
        return max(0.0, (last[index] - first[index]) * 8 / (last[0] - first[0]) / 1e6)

    def state(self, name: str) -> LinkState:
        """Capacity, measured rate and available bandwidth of link ``name``."""
        link = self.wiring.links[name]
        measured = self.rate_mbps(link)
        span = self._span(link)
        own = min(measured, self._own_mbps(name, span[0][0], span[1][0])) if span else 0.0
        available = max(link.capacity_mbps - (measured - own),
                        self.floor_frac * link.capacity_mbps)
        return LinkState(link.capacity_mbps, measured, available, own)

    def available(self) -> dict[str, float]:
        """Available bandwidth of every link, by name."""
        return {name: self.state(name).available_mbps for name in self.wiring.links}
