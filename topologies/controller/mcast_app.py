"""The controller's multicast app: measure the links, choose receivers, install OpenFlow groups.

Runs next to :mod:`topologies.controller.controller_app` in the same ``osken-manager`` (the testbed
starts
both for a topology that describes its wiring, such as :mod:`topologies.fabric`)::

    LTP_CONTROLLER_CONFIG=/path/controller.json osken-manager ... \
        topologies.controller.controller_app topologies.controller.mcast_app

From the same config file it reads ``wiring`` (the topology, :meth:`FabricTopo.wiring`: the
controller knows it from the harness, it does not discover it), ``mcast_control_port`` and
``mcast_cookie``. It measures every directed link from the port statistics that the forwarding
app polls every ``stats_interval_s`` (both apps receive each reply; this one keeps rates over
``link_window_s``, :mod:`topologies.controller.linkview`), and answers one JSON command per line on
``127.0.0.1:mcast_control_port`` (client: :class:`topologies.controller.multicast.MulticastClient`):

- ``links``: every directed link's capacity, measured rate and available bandwidth;
- ``select`` (``sender``, ``p``, ``policy``, ``seed``, ``round``, ``size_bytes``,
  ``max_wait_rounds``): who the sender should multicast to
  (:func:`topologies.controller.selmcast.select`: ``random-p``, ``selmcast`` or ``broadcast``), on
  the current view and this round's plan;
- ``multicast`` (``sender``, ``receivers``, optional ``group``): install the multicast in the
  switches (:mod:`topologies.controller.mcast_plan`): on every switch of the tree an OpenFlow group
  of type ALL with one bucket per copy, and a flow (priority 150, above forwarding, below a cut
  host's drop rule) from the sender's address to the group address into it. A switch that already
  has the group gets its buckets replaced (``OFPGC_MODIFY``, so a new round's choice is one message
  per switch); switches that leave the tree lose flow and group; no receivers removes it all. It
  answers after every switch has confirmed (a barrier) and fails if a switch refused a message;
- ``round`` (``round``, ``senders``, ``p``, ``policy``, ``seed``, ``size_bytes``, ``install``):
  one round of peer-to-peer training at once (:mod:`harness.p2p`): ``select`` for every sender in
  the given order on one view of the links, each later sender seeing the earlier ones' trees as
  load, then ``multicast`` for all of them with one barrier per switch (``install`` false: select
  only, for unicast copies); answers with the selections and the time each half took;
- ``groups``: every installed group's packet and byte counters, per bucket, read from the
  switches (``OFPGroupStatsRequest``), with the sender, group address and bucket targets.

The application-level fallback, unicast copies from the sender, needs nothing here.
"""

from __future__ import annotations

import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from topologies.controller.controller_app import answer_commands, read_config
from topologies.controller.linkview import LinkMeter, Wiring
from topologies.controller.mcast_plan import MulticastPlan, plan
from topologies.controller.selmcast import (MAX_WAIT_ROUNDS, RoundPlan, paces, plan_round,
                                            planned_bytes, select, tree_links)

MCAST_PRIORITY = 150
REPLY_S = 3.0


def _size(cmd: dict) -> int:
    """A select or round command's message size (the harness knows it: the model's)."""
    if "size_bytes" not in cmd:
        raise ValueError(f"a {cmd['op']} command needs size_bytes, the bytes each receiver gets.")
    return int(cmd["size_bytes"])


class MulticastController(app_manager.OSKenApp):
    """Link measurement, receiver selection and group entries; see the module docstring."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = read_config()
        self.wiring = Wiring(config["wiring"])
        interval_s = float(config.get("stats_interval_s", 0.5))
        window_s = float(config.get("link_window_s", max(1.0, 2 * interval_s)))
        self.meter = LinkMeter(self.wiring, window_s=window_s,
                               floor_frac=float(config.get("floor_frac", 0.05)))
        self.round_plan = RoundPlan()
        self.transfers: dict[str, int] = {}   # sender -> its running transfer (LinkMeter handle)
        self.cookie = int(config["mcast_cookie"])
        self.datapaths = {}
        self.installed: dict[tuple[str, str], MulticastPlan] = {}
        self.group_ids: dict[tuple[str, str], int] = {}
        self.waiting: dict[int, tuple[object, list]] = {}  # xid -> (event, replies)
        self.watched: set[int] = set()  # xids of changes whose refusal a command waits to hear
        self.refused: dict[int, dict] = {}
        self.control = hub.StreamServer(("127.0.0.1", int(config["mcast_control_port"])),
                                        lambda sock, addr: answer_commands(sock, self._command))
        self.control_thread = hub.spawn(self.control.serve_forever)

    # ---- switch events ----------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev) -> None:
        """Track connected switches."""
        if ev.state == MAIN_DISPATCHER:
            self.datapaths[ev.datapath.id] = ev.datapath
        else:
            self.datapaths.pop(ev.datapath.id, None)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats(self, ev) -> None:
        """Feed the link meter (the forwarding app sends the requests)."""
        now = time.monotonic()
        for s in ev.msg.body:
            if s.port_no <= 0xFFFFFF00:
                self.meter.observe(ev.msg.datapath.id, s.port_no, now, s.rx_bytes, s.tx_bytes)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev) -> None:
        """Wake whoever waits for this barrier (the forwarding app's barriers are not ours)."""
        self._answered(ev.msg, last=True)

    @set_ev_cls(ofp_event.EventOFPGroupStatsReply, MAIN_DISPATCHER)
    def group_stats_reply(self, ev) -> None:
        """Collect a group statistics reply; the last part wakes the waiting command."""
        msg = ev.msg
        self._answered(msg, last=not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev) -> None:
        """Remember what a switch refused of a change in progress, so its command can fail."""
        msg = ev.msg
        if msg.xid in self.watched:
            self.refused[msg.xid] = {"dpid": msg.datapath.id, "type": msg.type, "code": msg.code}

    def _answered(self, msg, last: bool) -> None:
        waiter = self.waiting.get(msg.xid)
        if waiter is not None:
            waiter[1].append(msg)
            if last:
                waiter[0].set()

    def _ask(self, dp, msg) -> list:
        """Send ``msg`` and return the switch's reply messages (waits up to REPLY_S)."""
        dp.set_xid(msg)
        done, replies = self.waiting[msg.xid] = (hub.Event(), [])
        dp.send_msg(msg)
        try:
            if not done.wait(timeout=REPLY_S):
                raise ValueError(f"switch {self.wiring.dpid_names.get(dp.id, dp.id)} did not "
                                 f"answer within {REPLY_S:g} s.")
        finally:
            self.waiting.pop(msg.xid, None)
        return replies

    def _send_watched(self, dp, msg, xids: set[int]) -> None:
        """Send a change whose refusal the caller will look for (its xid joins ``xids``)."""
        dp.set_xid(msg)
        xids.add(msg.xid)
        self.watched.add(msg.xid)
        dp.send_msg(msg)

    def _dp(self, dpid: int):
        dp = self.datapaths.get(dpid)
        if dp is None:
            raise ValueError(f"switch {self.wiring.dpid_names.get(dpid, dpid)} is not connected.")
        return dp

    # ---- commands ---------------------------------------------------------------------------

    def _command(self, cmd: dict) -> dict:
        op = cmd["op"]
        if op == "links":
            return {"links": [{"link": name, **vars(self.meter.state(name))}
                              for name in self.wiring.links]}
        if op == "select":
            chosen = select(cmd.get("policy", "selmcast"), cmd["sender"], cmd["p"], self.wiring,
                            self.meter.available(), self.round_plan,
                            round_=int(cmd.get("round", 0)), seed=int(cmd.get("seed", 0)),
                            size_bytes=_size(cmd),
                            max_wait_rounds=int(cmd.get("max_wait_rounds", MAX_WAIT_ROUNDS)))
            return {"t": time.time(), **chosen.as_dict()}
        if op == "multicast":
            new = plan(self.wiring, cmd["sender"], cmd["receivers"], cmd.get("group"))
            self._install([new])
            return {"t": time.time(), **new.as_dict()}
        if op == "round":
            return self._round(cmd)
        if op == "reset":   # a new training run: nobody has received, nothing is running
            self.round_plan = RoundPlan()
            for handle in self.transfers.values():
                self.meter.end_transfer(handle, time.monotonic())
            self.transfers = {}
            return {"t": time.time()}
        if op == "groups":
            return {"groups": self._group_stats()}
        raise ValueError(f"unknown command {op!r}; the commands are links, select, multicast, "
                         "round, reset, groups.")

    def _round(self, cmd: dict) -> dict:
        """Select the receivers of every sender in ``cmd["senders"]`` for one round on one view
        of the links (:func:`~topologies.controller.selmcast.plan_round`: in that order, each
        later sender seeing the earlier ones' trees as load; ``selmcast`` then jointly), then
        install all of their multicasts with one barrier per switch."""
        t0 = time.monotonic()
        size_bytes = _size(cmd)
        for sender in cmd["senders"]:   # a sender asks again once its last transfer is over
            if sender in self.transfers:
                self.meter.end_transfer(self.transfers.pop(sender), t0)
            self.round_plan.land(sender)
        available = self.meter.available()
        chosen = plan_round(cmd.get("policy", "selmcast"), cmd["senders"], cmd["p"], self.wiring,
                            available, self.round_plan, round_=int(cmd["round"]),
                            seed=int(cmd.get("seed", 0)), size_bytes=size_bytes,
                            max_wait_rounds=int(cmd.get("max_wait_rounds", MAX_WAIT_ROUNDS)))
        install = cmd.get("install", True)
        # Everyone planned in this round so far (under SSP, senders that asked earlier too).
        planned = {sender: receivers for sender, (_, receivers) in self.round_plan.trees.items()}
        pace = paces(self.wiring, available, planned, copies=not install)
        # Training traffic the controller schedules is not load on a link for the next round.
        for c in chosen:
            self.transfers[c.sender] = self.meter.start_transfer(t0, planned_bytes(
                self.wiring, {c.sender: c.receivers}, size_bytes, copies=not install))
            self.round_plan.fly(c.sender, tree_links(self.wiring, c.sender, c.receivers))
        t1 = time.monotonic()
        if install:
            self._install([plan(self.wiring, c.sender, c.receivers) for c in chosen])
        return {"t": time.time(), "select_s": t1 - t0, "install_s": time.monotonic() - t1,
                "selections": [{**c.as_dict(), "pace_mbps": pace[c.sender]} for c in chosen]}

    def _install(self, news: list[MulticastPlan]) -> None:
        """Install each plan (replacing the same sender's earlier one), then wait for one barrier
        per switch touched; fail if a switch refused any message."""
        for new in news:  # check every switch before changing any
            for sp in new.switches:
                self._dp(sp.dpid)
        touched, xids = {}, set()
        try:
            for new in news:
                key = (new.sender, new.group)
                gid = self.group_ids.setdefault(key, len(self.group_ids) + 1)
                old = self.installed.get(key)
                had = {sp.switch for sp in old.switches} if old else set()
                for sp in new.switches:
                    dp = self._put_group(sp, gid, new, sp.switch in had, xids)
                    touched[dp.id] = dp
                for switch in had - {sp.switch for sp in new.switches}:
                    dp = self.datapaths.get(self.wiring.switches[switch])
                    if dp is not None:  # else gone with its switch
                        touched[dp.id] = self._drop_group(dp, gid, new, xids)
                # What the switches hold once the barriers return, unless one refused.
                if new.switches:
                    self.installed[key] = new
                else:
                    self.installed.pop(key, None)
            for dp in touched.values():  # a refusal arrives before the barrier's reply
                self._ask(dp, dp.ofproto_parser.OFPBarrierRequest(dp))
            refused = [self.refused[x] for x in sorted(xids) if x in self.refused]
        finally:
            self.watched -= xids
            for x in xids:
                self.refused.pop(x, None)
        if refused:
            e = refused[0]
            raise ValueError(f"switch {self.wiring.dpid_names.get(e['dpid'])} refused a "
                             f"multicast change (OpenFlow error type {e['type']}, code "
                             f"{e['code']}).")

    def _put_group(self, sp, gid: int, new: MulticastPlan, modify: bool, xids: set[int]):
        """Add (or replace the buckets of) group ``gid`` on ``sp``'s switch, and the flow into
        it; return the datapath."""
        dp = self._dp(sp.dpid)
        ofp, parser = dp.ofproto, dp.ofproto_parser
        buckets = [parser.OFPBucket(actions=_bucket_actions(parser, b)) for b in sp.buckets]
        # The group before the flow that points at it: the switch applies them in order.
        self._send_watched(dp, parser.OFPGroupMod(
            dp, ofp.OFPGC_MODIFY if modify else ofp.OFPGC_ADD, ofp.OFPGT_ALL, gid, buckets), xids)
        into = parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionGroup(gid)])
        self._send_watched(dp, parser.OFPFlowMod(
            datapath=dp, cookie=self.cookie, priority=MCAST_PRIORITY, match=_match(parser, new),
            instructions=[into]), xids)
        return dp

    def _drop_group(self, dp, gid: int, new: MulticastPlan, xids: set[int]):
        """Remove the flow into group ``gid`` and the group from ``dp``; return ``dp``."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        self._send_watched(dp, parser.OFPFlowMod(
            datapath=dp, cookie=self.cookie, cookie_mask=0xFFFFFFFFFFFFFFFF,
            command=ofp.OFPFC_DELETE_STRICT, priority=MCAST_PRIORITY, out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY, match=_match(parser, new)), xids)
        self._send_watched(dp, parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_ALL, gid), xids)
        return dp

    def _group_stats(self) -> list[dict]:
        by_switch: dict[int, dict[int, object]] = {}
        for dpid in sorted({sp.dpid for p in self.installed.values() for sp in p.switches}):
            dp = self._dp(dpid)
            req = dp.ofproto_parser.OFPGroupStatsRequest(dp, 0, dp.ofproto.OFPG_ALL)
            by_switch[dpid] = {s.group_id: s for reply in self._ask(dp, req) for s in reply.body}
        out = []
        for key, p in self.installed.items():
            gid = self.group_ids[key]
            for sp in p.switches:
                s = by_switch[sp.dpid].get(gid)
                if s is None:
                    raise ValueError(f"switch {sp.switch} has no group {gid} for {p.sender}.")
                out.append({"switch": sp.switch, "sender": p.sender, "group": p.group,
                            "group_id": gid, "packet_count": s.packet_count,
                            "byte_count": s.byte_count,
                            "buckets": [{"port": b.port, "toward": b.toward,
                                         "packet_count": c.packet_count,
                                         "byte_count": c.byte_count}
                                        for b, c in zip(sp.buckets, s.bucket_stats)]})
        return out


def _match(parser, p: MulticastPlan):
    return parser.OFPMatch(eth_type=0x0800, ipv4_src=p.sender_ip, ipv4_dst=p.group)


def _bucket_actions(parser, bucket) -> list:
    rewrite = []
    if bucket.rewrite is not None:
        mac, ip = bucket.rewrite
        rewrite = [parser.OFPActionSetField(eth_dst=mac), parser.OFPActionSetField(ipv4_dst=ip)]
    return rewrite + [parser.OFPActionOutput(bucket.port)]
