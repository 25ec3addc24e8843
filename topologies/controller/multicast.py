"""Multicast from the harness's side: ask the controller, and send to a group or as unicast copies.

:class:`MulticastClient` speaks to the controller's multicast app
(:mod:`topologies.controller.mcast_app`): ``links()``, ``select(...)``, ``install(...)`` and
``groups()``. A testbed whose topology describes its wiring (:mod:`topologies.fabric`) has one as
``testbed.mcast``.

Sending, from inside an emulated host::

    python -m topologies.controller.multicast send --src 10.0.0.1 --to 239.1.0.1 --port 6300 \
        --count 200 --size 1000 --rate-mbps 20

sends ``count`` datagrams of ``size`` bytes, paced at ``rate_mbps`` (IP and UDP headers
counted), and prints one JSON line (datagrams, copies, bytes, seconds). With one multicast
address in ``--to`` the datagrams go to the group once each and the switches copy them
(:func:`send_to_group`; the socket names its outgoing interface by the source address, so the
host needs no multicast route). With a comma-separated list of receivers' addresses it sends a
unicast copy to each (:func:`send_unicast_copies`): the application-level fallback, which puts
every copy on the sender's own link and on every shared link toward the receivers.

The receivers count what arrives with any bound UDP socket (:mod:`topologies.impair.onoff`'s sink);
:func:`udp_in_datagrams` reads a host's delivered-datagram counter from outside, with no process.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
import time
from pathlib import Path

from topologies.controller.control import ControllerClient

HEADER_BYTES = 28  # IPv4 + UDP


class MulticastClient(ControllerClient):
    """The multicast app's commands (see :mod:`topologies.controller.mcast_app`)."""

    def __init__(self, port: int, timeout_s: float = 5.0, settle=None, purge=None) -> None:
        super().__init__(port, timeout_s, settle)
        self.purge = purge

    def links(self) -> dict[str, dict]:
        """Every directed link's capacity, measured rate and available bandwidth, by name."""
        return {row.pop("link"): row for row in self.command("links")["links"]}

    def select(self, sender: str, p: int, policy: str = "selmcast", *, seed: int = 0,
               round_: int = 0, size_bytes: int, **extra) -> dict:
        """Who ``sender`` should multicast ``size_bytes`` to this round, by ``policy`` (the
        controller's :class:`~topologies.controller.selmcast.Selection` as a dict)."""
        return self.command("select", sender=sender, p=p, policy=policy, seed=seed,
                            round=round_, size_bytes=size_bytes, **extra)

    def install(self, sender: str, receivers, group: str | None = None) -> dict:
        """Install ``sender``'s multicast to ``receivers`` in the switches (no receivers removes
        it); return once the datapaths forward by it. Answers with the plan."""
        args = {"sender": sender, "receivers": list(receivers)}
        if group is not None:
            args["group"] = group
        reply = self.command("multicast", **args)
        if self.settle is not None:
            self.settle()
        return reply

    def round(self, round_: int, senders, p: int, policy: str = "selmcast", *, seed: int = 0,
              size_bytes: int, install: bool = True) -> dict:
        """Select every sender's receivers for one round (in the order given) and, with
        ``install``, put all of their multicasts in the switches; return once the datapaths
        forward by them (``purge`` drops the datapaths' cached flows: a round cannot wait half
        a second for :meth:`install`'s settle). Answers ``{"selections": [...], "select_s", "install_s", "settle_s"}``."""
        reply = self.command("round", round=round_, senders=list(senders), p=p, policy=policy,
                             seed=seed, size_bytes=size_bytes, install=install)
        t0 = time.monotonic()
        if install and self.purge is not None:
            self.purge()
        reply["settle_s"] = time.monotonic() - t0
        return reply

    def reset(self) -> None:
        """Start afresh: no round planned, nobody has received yet (a new training run)."""
        self.command("reset")

    def groups(self) -> list[dict]:
        """Every installed group's counters per switch and bucket, read from the switches.

        The datapath counts the packets of the flows it has cached and hands the counts to the
        OpenFlow groups only when it revalidates them (every few hundred milliseconds), so
        counters read right after a burst lag behind it (192 of 300 packets, once); ``settle``
        first waits for a full revalidation pass.
        """
        if self.settle is not None:
            self.settle()
        return self.command("groups")["groups"]


def _paced(sock: socket.socket, addresses: list[str], port: int, count: int, size: int,
           rate_mbps: float) -> dict:
    payload = bytearray(size)
    gap_s = (size + HEADER_BYTES) * 8 / (rate_mbps * 1e6)
    t0 = due = time.monotonic()
    for i in range(count):
        payload[:4] = i.to_bytes(4, "big")  # a sequence number, should anyone look
        for address in addresses:
            sock.sendto(payload, (address, port))  # blocking: a full buffer waits, never drops
            due += gap_s
            ahead_s = due - time.monotonic()
            if ahead_s > 0.001:
                time.sleep(ahead_s)
    return {"datagrams": count, "copies": count * len(addresses),
            "payload_bytes": count * len(addresses) * size, "seconds": time.monotonic() - t0}


def send_to_group(src_ip: str, group: str, port: int, count: int, size: int,
                  rate_mbps: float) -> dict:
    """Send ``count`` datagrams to multicast ``group`` once each; the network copies them."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((src_ip, 0))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src_ip))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 4)
        return _paced(sock, [group], port, count, size, rate_mbps)


def send_unicast_copies(src_ip: str, receivers: list[str], port: int, count: int, size: int,
                        rate_mbps: float) -> dict:
    """The application-level fallback: each datagram sent to every receiver's own address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((src_ip, 0))
        return _paced(sock, receivers, port, count, size, rate_mbps)


def udp_in_datagrams(host_pid: int) -> int:
    """Datagrams delivered to sockets in the network namespace of process ``host_pid``."""
    lines = [line.split() for line in Path(f"/proc/{host_pid}/net/snmp").read_text().splitlines()
             if line.startswith("Udp:")]
    return int(lines[1][lines[0].index("InDatagrams")])


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m topologies.controller.multicast")
    sub = parser.add_subparsers(dest="role", required=True)
    s = sub.add_parser("send")
    s.add_argument("--src", required=True, help="the sender's own IPv4 address")
    s.add_argument("--to", required=True,
                   help="one multicast group address, or receivers' addresses, comma-separated")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--size", type=int, default=1000)
    s.add_argument("--rate-mbps", type=float, default=20.0)
    args = parser.parse_args(argv)
    to = [a.strip() for a in args.to.split(",") if a.strip()]
    if not 1 <= args.size <= 1472 or args.count < 1 or not args.rate_mbps > 0:
        parser.error("--size must be 1..1472 bytes, --count at least 1, --rate-mbps above 0.")
    if len(to) == 1 and ipaddress.ip_address(to[0]).is_multicast:
        report = send_to_group(args.src, to[0], args.port, args.count, args.size, args.rate_mbps)
    else:
        report = send_unicast_copies(args.src, to, args.port, args.count, args.size,
                                     args.rate_mbps)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
