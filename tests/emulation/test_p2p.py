"""Peer-to-peer training on the real fabric: real peers in the hosts, the coordinator, the
controller choosing receivers and the switches' groups copying (issue 15).

The fabric: two leaves of three peers (w1 w2 w3 | w4 w5 w6), w6 at a quarter of 100 Mbit/s.
Each run is a few rounds with several local steps per round, so the averaged model learns
something in seconds.
"""

import json

import numpy as np

from harness.p2p.run import execute
from harness.p2p.spec import PeerSpec
from harness.reporting import wire
from harness.running.capture import Capture
from harness.running.runfiles import RunFiles, read_jsonl
from tests.emulation.conftest import network_fixture

BASE = PeerSpec(n_leaves=2, workers_per_leaf=3, n_slow=1, rounds=6, local_steps=5,
                eval_every=3, timeout_s=120)


fabric = network_fixture("p2p-net", BASE.fabric, forked=True, stats_interval_s=0.25)


def _run(fabric, tmp_path, capture=None, **fields):
    tb, spawn = fabric
    spec = BASE.replace(**fields)
    run_dir = tmp_path / spec.run_id
    row, curves = execute(tb, spec, run_dir, "test", spawn, capture=capture)
    assert row["status"] == "ok", row["reason"]
    assert row["rounds_done"] == spec.rounds
    return spec, row, curves, run_dir / "raw"


def test_selmcast_through_switch_groups_trains_and_the_groups_copy(fabric, tmp_path):
    spec, row, curves, raw = _run(fabric, tmp_path, policy="selmcast")
    plans = read_jsonl(raw / "rounds.jsonl")
    assert [p["round"] for p in plans] == list(range(spec.rounds))
    # Every sender sent to at least p, and everyone it chose closed the message (no loss here).
    assert all(len(s["receivers"]) >= spec.p for p in plans for s in p["senders"])
    assert row["avg_p"] >= spec.p and row["delivered_p"] == row["avg_p"]
    # Each peer mixed what it was sent: the messages mixed in equal those sent, round for round.
    sent = sum(len(s["receivers"]) for p in plans[:-1] for s in p["senders"])
    mixed = sum(r["mixed"] for h in range(spec.n_workers)
                for r in read_jsonl(raw / f"w{h + 1}.jsonl"))
    assert mixed == sent
    # The switches' groups made the last round's copies: every bucket toward a receiver of
    # the last plan counted the whole message, and nothing else was installed for the sender.
    tb, _ = fabric
    last = {f"w{s['sender'] + 1}": {f"w{r + 1}" for r in s["receivers"]} for s in plans[-1]["senders"]}
    groups = tb.mcast.groups()
    datagrams = -(-4 * 109_386 // 1400)   # the MLP's floats in ~1,400-byte datagrams, at least
    for sender, receivers in last.items():
        buckets = {b["toward"]: b["packet_count"] for g in groups if g["sender"] == sender
                   for b in g["buckets"] if b["toward"].startswith("w")}
        assert set(buckets) == receivers
        assert all(n >= datagrams * 0.9 for n in buckets.values()), buckets
    # Every round's groups were recorded, and the last round's buckets toward peers are its plan.
    logged = read_jsonl(raw / "groups.jsonl")
    assert [r["round"] for r in logged] == list(range(spec.rounds))
    copies: dict[str, set] = {}
    for g in logged[-1]["groups"]:
        copies.setdefault(g["sender"], set()).update(
            b["toward"] for b in g["buckets"] if b["toward"].startswith("w"))
    assert {s: copies.get(s) for s in last} == last
    # The averaged model learned, and better than chance by far.
    assert row["final_accuracy"] > 0.5
    assert curves[-1]["acc_mean"] > curves[0]["acc_mean"]


def test_random_p_tcp_copies_send_to_exactly_p(fabric, tmp_path):
    spec, row, _, raw = _run(fabric, tmp_path, policy="random-p", copy="unicast", scheme="tcp",
                             rounds=4)
    assert row["avg_p"] == spec.p == row["delivered_p"]
    assert row["final_accuracy"] > 0.4


def test_ssp_keeps_every_peer_within_the_bound(fabric, tmp_path):
    spec, row, _, raw = _run(fabric, tmp_path, policy="selmcast-p", sync="ssp:1", rounds=8)
    starts = {h: {r["round"]: r["start_mono"] + r["wait_s"]
                  for r in read_jsonl(raw / f"w{h + 1}.jsonl")} for h in range(spec.n_workers)}
    asked = {h: {r["round"]: r["start_mono"] for r in read_jsonl(raw / f"w{h + 1}.jsonl")}
             for h in range(spec.n_workers)}
    for h, rounds in starts.items():
        for t, began in rounds.items():
            if t - 1 < 0:
                continue
            # round t began only after every peer had asked for round t - 1 (bound 1)
            assert all(asked[o][t - 1] <= began + 1e-3 for o in asked), (h, t)
    # selmcast-p: exactly p, plus whoever had waited too long (forced in)
    plans = read_jsonl(raw / "rounds.jsonl")
    assert all(len(s["receivers"]) == spec.p + s["forced"] for p in plans for s in p["senders"])
    assert row["avg_p"] >= spec.p


def test_loss_tolerant_multicast_closes_early_under_loss(fabric, tmp_path):
    """Also the dissector on a capture of w1 in that run (docs/reading-a-capture.md)."""
    spec, row, _, raw = _run(fabric, tmp_path, Capture(("w1",)), policy="random-p",
                             scheme="mcast+close_frac=0.9", loss_pct=5.0)
    summaries = [json.loads((raw / f"w{h + 1}.summary.json").read_text())
                 for h in range(spec.n_workers)]
    assert row["early_closes"] > 0
    assert sum(s["transport_stats"]["early_closes"] for s in summaries) == row["early_closes"]
    assert 0.9 <= row["mixed_frac"] < 1.0
    final = np.load(raw / "w1.final.npy")
    assert np.isfinite(final).all()
    pcap = RunFiles(raw.parent).pcap("w1")
    assert wire.problems(pcap) == 0
    assert wire.count(pcap, "udp && !ltpp") == 0, "a UDP datagram the dissector did not take"
    frames = wire.dissect(pcap, wire.MCAST_FIELDS, "ltpp")
    ip = fabric[0].host_ips()["w1"]
    emitted = frames[frames["ip.src"] == ip]
    # Everything w1 emitted went out through its one port: the capture counts what it counted.
    assert len(emitted) == summaries[0]["transport_stats"]["datagrams_out"]
    assert {1, 2, 3} <= set(frames["ltpp.kind"])   # DATA, POLL, STATUS (CLOSE: after a wait)
    assert (emitted["ltpp.sender"] == 0).all()
