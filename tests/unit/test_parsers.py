"""Parsers of counters read from OVS, tc, nftables and nstat (on captured outputs)."""

import json

from topologies.impair import loss as impair
from topologies.testbed.counters import QueueCounters, parse_dump_ports, parse_nstat, parse_qdisc

DUMP_PORTS = """OFPST_PORT reply (OF1.3) (xid=0x2): 3 ports
  port  2: rx pkts=7, bytes=690, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=7, bytes=650, drop=1, errs=0, coll=0
           duration=1.034s
  port LOCAL: rx pkts=0, bytes=0, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=0, bytes=0, drop=0, errs=0, coll=0
  port  1: rx pkts=6, bytes=580, drop=0, errs=0, frame=0, over=0, crc=0
           tx pkts=60, bytes=5600, drop=0, errs=0, coll=0
"""


def test_dump_ports():
    ports = parse_dump_ports(DUMP_PORTS)
    assert set(ports) == {1, 2}
    assert ports[1].tx_packets == 60 and ports[1].tx_bytes == 5600
    assert ports[2].rx_bytes == 690 and ports[2].tx_dropped == 1


def test_qdisc_takes_the_pfifo():
    text = json.dumps([
        {"kind": "htb", "handle": "5:", "bytes": 10, "packets": 2, "drops": 0},
        {"kind": "pfifo", "handle": "10:", "parent": "5:1", "bytes": 3000, "packets": 3,
         "drops": 4, "overlimits": 0, "requeues": 0},
    ])
    assert parse_qdisc(text) == QueueCounters(sent_packets=3, sent_bytes=3000, drops=4,
                                              overlimits=0, requeues=0)


def test_nstat_keeps_tcp_and_udp():
    text = json.dumps({"kernel": {"TcpRetransSegs": 5, "UdpInDatagrams": 9, "IpInReceives": 1}})
    assert parse_nstat(text) == {"TcpRetransSegs": 5, "UdpInDatagrams": 9}


def test_loss_ruleset_scales_probability():
    rules = impair.ruleset("w1-eth0", 2.5)
    assert 'device "w1-eth0"' in rules
    assert f"mod {impair.RESOLUTION} < 25000" in rules
    assert " drop\n" not in impair.ruleset("w1-eth0", 0.0)


def test_nft_counters():
    text = json.dumps({"nftables": [
        {"metainfo": {"version": "1.0.6"}},
        {"counter": {"family": "netdev", "name": "arrived", "table": "ltp_impair",
                     "handle": 1, "packets": 1000, "bytes": 5}},
        {"counter": {"family": "netdev", "name": "dropped", "table": "ltp_impair",
                     "handle": 2, "packets": 51, "bytes": 5}},
    ]})
    assert impair.parse_counters(text) == {"arrived": 1000, "dropped": 51}
