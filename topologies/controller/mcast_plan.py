"""What the switches must hold so that one datagram a sender sends reaches exactly its receivers.

Pure data (the os-ken app :mod:`topologies.controller.mcast_app` turns it into OpenFlow messages),
so it is tested without a switch.

**Addressing.** Each sender has a multicast group address of its own, :func:`group_address`
(``239.1.0.<last octet of the sender's IP>``), and sends its parameters there with an unmodified
UDP socket (:mod:`topologies.controller.multicast`). Every switch on the multicast tree holds a
flow that matches IPv4 from the sender's address to that group address and hands the packet to an
OpenFlow group of type ALL, which applies each of its buckets to a copy of the packet.

**Buckets.** A bucket that leads to another switch only outputs the copy there: one copy per link,
however many receivers are behind it (that is the whole point of multicast). A bucket that leads
to a receiver first rewrites the destination MAC and IPv4 address to the receiver's own, then
outputs: the receiver gets an ordinary unicast datagram on its own address, so its socket needs
no group membership (``IP_ADD_MEMBERSHIP``, IGMP), no multicast route and nothing else that
could be left out; Open vSwitch fixes the IP and UDP checksums as it rewrites. The alternative, a
multicast destination all the way with receivers that join the group, leaves the MAC filter, the
membership and the route to every receiving application; the rewrite keeps all of it in the
network, where the selection is made.

A :class:`SwitchPlan` lists, for one switch, the buckets in the order they are installed, which is
also the order of the bucket counters the switch reports (OpenFlow group statistics).
"""

from __future__ import annotations

import dataclasses

from topologies.controller.linkview import Wiring, WiringError

GROUP_PREFIX = "239.1.0."


def group_address(sender_ip: str) -> str:
    """The multicast group address of the sender with IPv4 address ``sender_ip``."""
    return GROUP_PREFIX + sender_ip.rsplit(".", 1)[1]


@dataclasses.dataclass(frozen=True)
class Bucket:
    """One copy a switch makes: out of ``port``, toward the switch or receiver ``toward``;
    ``rewrite`` is the receiver's (mac, ip) on its last hop, None toward a switch."""

    port: int
    toward: str
    rewrite: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class SwitchPlan:
    """A switch's part of one multicast: its dpid and its group's buckets."""

    switch: str
    dpid: int
    buckets: tuple[Bucket, ...]


@dataclasses.dataclass(frozen=True)
class MulticastPlan:
    """Everything the switches need for ``sender``'s multicast to ``receivers`` at ``group``."""

    sender: str
    sender_ip: str
    group: str
    receivers: tuple[str, ...]
    switches: tuple[SwitchPlan, ...]

    def as_dict(self) -> dict:
        """JSON-ready."""
        return dataclasses.asdict(self)


def plan(wiring: Wiring, sender: str, receivers, group: str | None = None) -> MulticastPlan:
    """The switches' part of ``sender``'s multicast to ``receivers`` (see the module docstring).

    Switches are listed in the order the tree reaches them, buckets in the order of the
    receivers given (a switch's bucket toward another switch where its first receiver behind it
    comes).
    """
    sender_ip = wiring.check_host(sender)["ip"]
    receivers = tuple(receivers)
    if sender in receivers:
        raise WiringError(f"{sender} cannot be its own receiver.")
    if len(set(receivers)) != len(receivers):
        raise WiringError(f"a receiver is named twice in {list(receivers)}.")
    buckets: dict[str, dict[int, Bucket]] = {}
    for r in receivers:
        entry = wiring.check_host(r)
        for hop in wiring.hops(sender, r):
            rewrite = (entry["mac"], entry["ip"]) if hop.next == r else None
            buckets.setdefault(hop.switch, {}).setdefault(hop.port, Bucket(hop.port, hop.next,
                                                                           rewrite))
    return MulticastPlan(sender, sender_ip, group or group_address(sender_ip), receivers,
                         tuple(SwitchPlan(s, wiring.switches[s], tuple(b.values()))
                               for s, b in buckets.items()))
