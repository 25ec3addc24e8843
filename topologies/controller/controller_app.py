"""The SDN controller: an os-ken app that forwards for a known topology and reports port stats.

Run by :mod:`topologies.testbed.network` as::

    LTP_CONTROLLER_CONFIG=/path/controller.json osken-manager \
        --ofp-listen-host 127.0.0.1 --ofp-tcp-listen-port PORT topologies.controller.controller_app

The config file (JSON) gives the forwarding table (``hosts``: mac and switch port of every host;
with several switches, ``switches`` gives each dpid a table of its own, and ``attached`` marks the
entry of the switch a host is plugged into), the port statistics file (``stats_path``, JSON lines)
and the polling interval (``stats_interval_s``). When a switch connects the app installs, in one
go, an exact-match rule per host MAC (``priority 100``), a broadcast rule that floods (ARP, should
a host ever need it) and a table-miss rule that drops: the switches run in ``secure`` mode, so
nothing moves that this app did not allow, and nothing ever reaches the controller as a packet-in.
Every rule carries the cookie from the config so the harness can poll the switch for them.
Statistics are emitted as data, one JSON object per port per poll, never as text. The multicast app
(:mod:`topologies.controller.mcast_app`), when it runs alongside, reads the same replies.

os-ken is Ryu's maintained fork with the same API; Ryu 4.34 itself no longer installs or starts
on Python 3.11 (eventlet dropped what it needs).

**Commands.** The app also listens on ``127.0.0.1:control_port`` (from the config) for one JSON
command per line and answers each with one JSON line (``{"ok": true, ...}`` or ``{"ok": false,
"error": "..."}``); :mod:`topologies.controller.control` is the client. ``cut`` takes a host off
the network in the switch (its forwarding rule is removed and a rule of higher priority drops
everything arriving on its port), ``restore`` puts the forwarding back, ``flows`` lists the rules
the app has installed. Every command that changes the switch is written, with the time the flow
mods were sent, to ``events_path`` (JSON lines), so a run knows when its link failed.
"""

from __future__ import annotations

import json
import os
import socket
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER
from os_ken.controller.handler import set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

CONFIG_ENV = "LTP_CONTROLLER_CONFIG"  # the harness sets it (topologies/testbed/network.py)


def read_config() -> dict:
    """The settings the harness wrote for the apps, from the file that ``$LTP_CONTROLLER_CONFIG``
    names."""
    with open(os.environ[CONFIG_ENV]) as f:
        return json.load(f)


class IncastController(app_manager.OSKenApp):
    """Static forwarding for the incast star plus periodic per-port statistics."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = read_config()
        self.hosts = config["hosts"]
        # One table per switch (keyed by dpid) where there are several; else one for all.
        self.tables = {int(dpid): table for dpid, table in config.get("switches", {}).items()}
        self.cookie = int(config["cookie"])
        self.interval_s = float(config.get("stats_interval_s", 0.5))
        # Line-buffered so the harness can read a consistent prefix at any moment.
        self.stats_file = open(config["stats_path"], "a", buffering=1)
        self.datapaths = {}
        self.running = True
        self.monitor = hub.spawn(self._poll_stats)
        self.cut_hosts: set[str] = set()
        self.barriers: dict[int, object] = {}
        self.events_file = (open(config["events_path"], "a", buffering=1)
                            if config.get("events_path") else None)
        self.control = None
        if config.get("control_port"):
            self.control = hub.StreamServer(("127.0.0.1", int(config["control_port"])),
                                            self._control_connection)
            self.control_thread = hub.spawn(self.control.serve_forever)

    def close(self) -> None:
        """Stop polling and close the statistics file (os-ken calls this on shutdown)."""
        self.running = False
        hub.kill(self.monitor)
        self.stats_file.close()
        if self.events_file is not None:
            self.events_file.close()

    def _flow(self, dp, priority, match, actions, delete=False) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        if delete:
            dp.send_msg(parser.OFPFlowMod(datapath=dp, cookie=self.cookie,
                                          cookie_mask=0xFFFFFFFFFFFFFFFF,
                                          command=ofp.OFPFC_DELETE_STRICT, priority=priority,
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                          match=match))
            return
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        dp.send_msg(parser.OFPFlowMod(datapath=dp, cookie=self.cookie, priority=priority,
                                      match=match, instructions=inst))

    def _table(self, dp) -> list[dict]:
        """The forwarding entries of switch ``dp``."""
        return self.tables.get(dp.id, self.hosts)

    def _forward(self, dp, host: dict, delete: bool = False) -> None:
        """The exact-match rule that delivers to ``host`` (added, or removed)."""
        parser = dp.ofproto_parser
        self._flow(dp, 100, parser.OFPMatch(eth_dst=host["mac"]),
                   [parser.OFPActionOutput(host["port"])], delete)

    def _isolate(self, dp, host: dict, delete: bool = False) -> None:
        """A rule that drops everything arriving from ``host``'s port (added, or removed)."""
        self._flow(dp, 200, dp.ofproto_parser.OFPMatch(in_port=host["port"]), [], delete)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev) -> None:
        """Install the whole forwarding table as soon as the switch says hello."""
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        self._flow(dp, 0, parser.OFPMatch(), [])  # table miss: drop, never packet-in
        self._flow(dp, 10, parser.OFPMatch(eth_dst="ff:ff:ff:ff:ff:ff"),
                   [parser.OFPActionOutput(ofp.OFPP_FLOOD)])
        for host in self._table(dp):
            self._forward(dp, host)
        self.logger.info("installed %d flows on datapath %016x", len(self._table(dp)) + 2, dp.id)

    # ---- commands ---------------------------------------------------------------------------

    def _barrier(self, dp, timeout_s: float = 2.0) -> None:
        """Wait until the switch has applied every earlier message (its barrier reply)."""
        msg = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.set_xid(msg)
        done = self.barriers[msg.xid] = hub.Event()
        dp.send_msg(msg)
        try:
            if not done.wait(timeout=timeout_s):
                raise ValueError(f"the switch did not confirm the change within {timeout_s:g} s.")
        finally:
            self.barriers.pop(msg.xid, None)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev) -> None:
        """Wake the command waiting for this barrier."""
        done = self.barriers.get(ev.msg.xid)
        if done is not None:
            done.set()

    def _control_connection(self, sock: socket.socket, addr) -> None:
        """Answer one JSON command per line until the client closes the connection."""
        answer_commands(sock, self._command)

    def _command(self, cmd: dict) -> dict:
        op = cmd["op"]
        if op == "flows":
            return {"cut": sorted(self.cut_hosts), "datapaths": len(self.datapaths)}
        if op not in ("cut", "restore"):
            raise ValueError(f"unknown command {op!r}; the commands are cut, restore, flows.")
        host = next((h for h in self.hosts if h["host"] == cmd["host"]), None)
        if host is None:
            raise ValueError(f"no host named {cmd['host']!r} in this topology.")
        if not self.datapaths:
            raise ValueError("no switch is connected.")
        for dp in self.datapaths.values():
            entry = next(h for h in self._table(dp) if h["host"] == host["host"])
            attached = entry.get("attached", True)  # only where the host is plugged in
            if op == "cut":
                if attached:
                    self._isolate(dp, entry)
                self._forward(dp, entry, delete=True)
            else:
                self._forward(dp, entry)
                if attached:
                    self._isolate(dp, entry, delete=True)
            self._barrier(dp)
        (self.cut_hosts.add if op == "cut" else self.cut_hosts.discard)(host["host"])
        event = {"t": time.time(), "op": op, "host": host["host"], "port": host["port"]}
        if self.events_file is not None:
            self.events_file.write(json.dumps(event) + "\n")
        return event

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev) -> None:
        """Track connected switches so the poller knows whom to ask."""
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self.datapaths[dp.id] = dp
        else:
            self.datapaths.pop(dp.id, None)

    def _poll_stats(self) -> None:
        while self.running:
            for dp in list(self.datapaths.values()):
                dp.send_msg(dp.ofproto_parser.OFPPortStatsRequest(dp, 0, dp.ofproto.OFPP_ANY))
            hub.sleep(self.interval_s)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats(self, ev) -> None:
        """Write one JSON line per port: counters as the switch reports them."""
        now = time.time()
        dpid = ev.msg.datapath.id
        for s in ev.msg.body:
            if s.port_no > 0xFFFFFF00:  # the LOCAL port and other reserved numbers
                continue
            self.stats_file.write(json.dumps({
                "t": now, "dpid": dpid, "port": s.port_no,
                "rx_packets": s.rx_packets, "tx_packets": s.tx_packets,
                "rx_bytes": s.rx_bytes, "tx_bytes": s.tx_bytes,
                "rx_dropped": s.rx_dropped, "tx_dropped": s.tx_dropped,
                "rx_errors": s.rx_errors, "tx_errors": s.tx_errors,
            }) + "\n")


def answer_commands(sock: socket.socket, command) -> None:
    """Answer one JSON command per line with ``command(cmd)`` until the client closes the
    connection; a ValueError, KeyError or TypeError becomes ``{"ok": false, "error": ...}``."""
    stream = sock.makefile("rwb")
    try:
        for line in stream:
            try:
                reply = {"ok": True, **command(json.loads(line))}
            except (ValueError, KeyError, TypeError) as exc:
                reply = {"ok": False, "error": str(exc)}
            stream.write((json.dumps(reply) + "\n").encode())
            stream.flush()
    finally:
        stream.close()
        sock.close()
