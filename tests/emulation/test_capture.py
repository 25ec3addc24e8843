"""Captures from a run (``run-sweep --capture``): the pcap holds what the counters say arrived at
the PS, stays within its bound, and no tcpdump is left running afterwards."""

import json
import os
from pathlib import Path

from harness.running.capture import Capture, pcap_records
from harness.running.runfiles import RunFiles
from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import incast_fixture

PROJECT = Path(__file__).resolve().parents[2]

bed = incast_fixture("capture", n_workers=2)


def _tcpdumps() -> list[str]:
    """Live tcpdump processes started from this project's testbeds (cwd in the project)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if cmd.endswith(b"tcpdump") and cwd.is_relative_to(PROJECT):
            found.append(pid)
    return found


def test_a_capture_of_ps1_holds_what_arrived_and_stops_with_the_run(bed, tmp_path):
    spec = RunSpec(transport="ltp", loss_pct=2.0, n_workers=2, iterations=10, eval_every=10,
                   timeout_s=120)
    capture = Capture(("ps1",), snaplen_bytes=96, max_mb=50)
    tb, spawn = bed
    row, _, _ = execute(tb, spec, tmp_path / spec.run_id, "test", spawn, capture=capture)
    assert row["status"] == "ok", row["reason"]
    files = RunFiles(tmp_path / spec.run_id)
    pcap = files.pcap("ps1")
    assert pcap.exists() and "listening on" in files.capture_log("ps1").read_text()
    assert _tcpdumps() == []
    packets = pcap_records(pcap.read_bytes())
    assert pcap.stat().st_size <= capture.max_mb * 1e6
    assert all(len(frame) <= capture.snaplen_bytes <= 96 for _, frame in packets)
    assert max(length for length, _ in packets) > capture.snaplen_bytes   # cut, length kept
    ps_ip = tb.host_ips()["ps1"]
    to_ps = sum(1 for _, frame in packets if _ipv4_dst(frame) == ps_ip)
    counters = json.loads(files.counters.read_text())
    arrived = (counters["after"]["impair"]["ps1"]["arrived"]
               - counters["before"]["impair"]["ps1"]["arrived"])
    assert arrived > 100
    # The capture starts before the first snapshot and stops after the last, and sees packets
    # before the ingress loss: about as many as the counter, never clearly fewer.
    assert arrived * 0.98 <= to_ps <= arrived * 1.05 + 20, (to_ps, arrived)


def _ipv4_dst(frame: bytes) -> str | None:
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    return ".".join(str(b) for b in frame[30:34])
