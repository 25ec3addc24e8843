"""The Wireshark dissector on real runs: a capture at the PS of an ``ltp`` and of a ``plot`` run
with loss dissects with no malformed datagram, every UDP datagram is one of ours, and what the
capture shows the PS sending agrees with the PS's own counters (DATA, retransmissions, closes by
reason)."""

import pytest

from harness.reporting import wire
from harness.running.capture import Capture
from harness.running.runfiles import RunFiles
from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import incast_fixture

bed = incast_fixture("dissector", n_workers=2)
PS_IP = "10.0.0.254"
REASONS = {1: "close_complete", 2: "close_early", 3: "close_max_wait"}


@pytest.mark.parametrize("transport", ["ltp", "plot"])
def test_a_lossy_run_dissects_and_agrees_with_the_counters(bed, tmp_path, transport):
    spec = RunSpec(transport=transport, loss_pct=5.0, n_workers=2, iterations=6, eval_every=6,
                   timeout_s=120)
    tb, spawn = bed
    row, _, _ = execute(tb, spec, tmp_path / spec.run_id, "test", spawn,
                        capture=Capture(("ps1",)))
    assert row["status"] == "ok", row["reason"]
    files = RunFiles(tmp_path / spec.run_id)
    pcap = files.pcap("ps1")
    assert wire.problems(pcap) == 0
    assert wire.count(pcap, "udp && !ltpt") == 0, "a UDP datagram the dissector did not take"
    frames = wire.dissect(pcap)
    assert len(frames) > 100
    if transport == "plot":
        assert frames["ltpt.segment"].max() >= 1, "PLOT sends one segment per layer"
    ps = files.host_summary("ps1").transport_stats
    sent = frames[frames["ip.src"] == PS_IP]
    data = sent[sent["ltpt.type"] == 1]
    assert len(data) == ps["data_sent"]
    assert int((data["ltpt.flags"] & 0x02 > 0).sum()) == ps["retransmits"]
    closes = wire.distinct_closes(frames, PS_IP)
    for reason, counter in REASONS.items():
        assert int((closes["ltpt.close.reason"] == reason).sum()) == ps[counter], counter
    # The workers' DATA seen at the PS's port: what the switch's queue let through, before the
    # loss at the PS's ingress; never more than they sent.
    for rank in range(spec.n_workers):
        mine = frames[(frames["ltpt.sender"] == rank) & (frames["ltpt.type"] == 1)]
        assert 0 < len(mine) <= files.host_summary(f"w{rank + 1}").transport_stats["data_sent"]
