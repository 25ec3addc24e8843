"""The SDN controller: an os-ken app that forwards for a known topology and reports port stats.

Run by :mod:`topologies.network` as::

    LTP_CONTROLLER_CONFIG=/path/controller.json osken-manager \
        --ofp-listen-host 127.0.0.1 --ofp-tcp-listen-port PORT topologies.controller_app

The config file (JSON) gives the forwarding table (``hosts``: mac and switch port of every host),
the port statistics file (``stats_path``, JSON lines) and the polling interval
(``stats_interval_s``). When the switch connects the app installs, in one go, an exact-match rule
per host MAC (``priority 100``), a broadcast rule that floods (ARP, should a host ever need it) and
a table-miss rule that drops: the switch runs in ``secure`` mode, so nothing moves that this app
did not allow, and nothing ever reaches the controller as a packet-in. Every rule carries
the cookie from the config so the harness can poll the switch for them. Statistics are emitted as data, one JSON
object per port per poll, never as text.

os-ken is Ryu's maintained fork with the same API; Ryu 4.34 itself no longer installs or starts
on Python 3.11 (eventlet dropped what it needs).
"""

from __future__ import annotations

import json
import os
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER
from os_ken.controller.handler import set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

CONFIG_ENV = "LTP_CONTROLLER_CONFIG"  # the harness sets it (topologies/network.py)


class IncastController(app_manager.OSKenApp):
    """Static forwarding for the incast star plus periodic per-port statistics."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        with open(os.environ[CONFIG_ENV]) as f:
            config = json.load(f)
        self.hosts = config["hosts"]
        self.cookie = int(config["cookie"])
        self.interval_s = float(config.get("stats_interval_s", 0.5))
        # Line-buffered so the harness can read a consistent prefix at any moment.
        self.stats_file = open(config["stats_path"], "a", buffering=1)
        self.datapaths = {}
        self.running = True
        self.monitor = hub.spawn(self._poll_stats)

    def close(self) -> None:
        """Stop polling and close the statistics file (os-ken calls this on shutdown)."""
        self.running = False
        hub.kill(self.monitor)
        self.stats_file.close()

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev) -> None:
        """Install the whole forwarding table as soon as the switch says hello."""
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser

        def add(priority, match, actions):
            inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
            dp.send_msg(parser.OFPFlowMod(datapath=dp, cookie=self.cookie, priority=priority,
                                          match=match, instructions=inst))

        add(0, parser.OFPMatch(), [])  # table miss: drop, never packet-in
        add(10, parser.OFPMatch(eth_dst="ff:ff:ff:ff:ff:ff"), [parser.OFPActionOutput(ofp.OFPP_FLOOD)])
        for host in self.hosts:
            add(100, parser.OFPMatch(eth_dst=host["mac"]), [parser.OFPActionOutput(host["port"])])
        self.logger.info("installed %d flows on datapath %016x", len(self.hosts) + 2, dp.id)

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
