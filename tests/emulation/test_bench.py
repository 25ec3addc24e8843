"""``invoke bench-transport`` runs every scheme with its own settings in force on the emulated
incast: the settings that define a scheme are read back from the kernel while its cell runs.

- every host's route to the subnet, as the cell starts and as it ends: ``rto_min`` exactly for
  ``tcp-cubic-lowrto`` (set by its host commands), and gone again for the cells after it;
- every TCP worker's socket after its pushes: the congestion control in effect
  (``TCP_CONGESTION``) and the RTO (``TCP_INFO``): under the kernel's 200 ms floor only with the
  lowered minimum (the kernel's RTO is the smoothed RTT plus the larger of four deviations and the
  minimum; delayed ACKs on these loaded cores put tens of milliseconds into the first two terms,
  so a tighter bound than the floor would test the cores, not the setting);
- every LTP end: Ethernet-sized datagrams (the emulated path's MTU is 1500; loopback's would
  give 64 KB), and on the wire, captured at the PS during LTP's cell, every datagram is exactly one
  LTP packet of at most 1,472 bytes although the workers send runs of them as UDP GSO writes.

Each cell pushes twice; the whole module takes about a minute after the testbed is up.
"""

import re
import struct
import time
from pathlib import Path

import pytest

from harness.bench import run as bench
from harness.hosts.zygote import Zygote
from harness.running.runfiles import RunFiles
from topologies.incast import PS_NAME, IncastParams, worker_name
from topologies.testbed.network import Testbed
from transports import native, registry

# The lowered RTO first: the cells after it must find the kernel's own route again.
SCHEMES = ("tcp-cubic-lowrto", "tcp-cubic", "tcp-reno", "tcp-bbr", "ltp")
HOSTS = {PS_NAME, *(worker_name(r) for r in range(8))}


def _kernel_has(cc: str) -> bool:
    return cc in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    out = {}
    with Testbed(IncastParams(8, 100, None, 64, 0.0), folder / "net") as tb, \
            Zygote(folder / "net", tb.ledger) as zygote:
        for slug in SCHEMES:
            if slug == "tcp-bbr" and not _kernel_has("bbr"):
                continue
            capture = _start_capture(tb, folder / f"{slug}.pcap") if slug == "ltp" else None
            try:
                cell = bench.run_cell(tb, zygote, folder / slug, slug, iterations=2)
            finally:
                if capture:
                    capture.kill()
            out[slug] = (cell, RunFiles(folder / slug))
    return out


def _start_capture(tb, pcap: Path):
    """tcpdump of the UDP datagrams reaching the PS, once it listens (packets written
    unbuffered)."""
    log = pcap.with_suffix(".log")
    proc = tb.start_process(PS_NAME, ["tcpdump", "-i", f"{PS_NAME}-eth0", "-nn", "-U", "-s", "128",
                                      "-w", str(pcap), "udp"], log)
    deadline = time.monotonic() + 10
    while "listening on" not in (log.read_text() if log.exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, "tcpdump did not start"
        time.sleep(0.02)
    return proc


def _udp_payloads(pcap: Path):
    """(frame bytes on the wire, UDP payload's first bytes, UDP payload length) per datagram."""
    data = pcap.read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    assert struct.unpack(endian + "I", data[20:24])[0] == 1, "not an Ethernet capture"
    pos = 24
    while pos + 16 <= len(data):
        _, _, incl, orig = struct.unpack(endian + "IIII", data[pos:pos + 16])
        frame = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        if len(frame) < incl:
            break   # cut short when tcpdump was stopped
        ip = frame[14:]
        udp = ip[(ip[0] & 15) * 4:]
        yield orig, udp[8:], struct.unpack(">H", udp[4:6])[0] - 8


@pytest.mark.parametrize("slug", SCHEMES)
def test_scheme_settings_are_in_force_during_its_cell(cells, slug):
    if slug not in cells:
        pytest.skip("this kernel offers no BBR")
    cell, files = cells[slug]
    assert cell.status == "ok", cell.reason
    options = registry.create(slug).options()
    rto_min_ms = options.get("rto_min_ms")
    for routes in (cell.routes_before, cell.routes_after):
        assert set(routes) == HOSTS
        for host, route in routes.items():
            found = re.search(r"rto_min (?:lock )?(\d+)ms", route)
            if rto_min_ms is None:
                assert found is None, f"{host}: {route}"
            else:
                assert found and int(found.group(1)) == rto_min_ms, f"{host}: {route}"
    summaries = {h: files.host_summary(h) for h in HOSTS}
    assert all(summaries.values()), "a host did not write its summary"
    for host, summary in summaries.items():
        stats = summary.transport_stats
        if slug.startswith("tcp"):
            if host == PS_NAME:
                continue   # the workers' sockets carry the pushes
            assert stats["cc"] == options["cc"], host
            if rto_min_ms is None:
                assert stats["rto_ms"] >= 200, host
            else:
                assert stats["rto_ms"] < 200, host
        else:
            assert stats["datagram_bytes"] == 1472, host


def test_ltp_datagrams_on_the_wire_are_single_packets(cells):
    cell, files = cells["ltp"]
    assert cell.status == "ok", cell.reason
    lib = native._core()[1]
    n = 0
    for frame_bytes, ltp, length in _udp_payloads(files.dir.parent / "ltp.pcap"):
        n += 1
        assert frame_bytes <= 1514 and length <= 1472
        # magic, version, type; byte 5 says the datagram ends in a trailer (number and MAC tag:
        # auth is on by default)
        assert ltp[:3] == b"\x4c\x50" + bytes([lib.LTP_VERSION]) and 1 <= ltp[3] <= 5, ltp[:4]
        assert ltp[5] != 0, "a datagram without its MAC tag"
        if ltp[3] == 1:   # DATA: its payload length field accounts for the whole datagram
            assert (struct.unpack("<H", ltp[36:38])[0]
                    == length - lib.LTP_DATA_HDR_BYTES - lib.LTP_TRAILER_BYTES)
    assert n >= 2 * 8 * 300, "the capture missed the pushes"   # 2 pushes of ~300 DATA per worker
    workers = [files.host_summary(worker_name(r)).transport_stats for r in range(8)]
    assert all(w["udp_gso"] == 1.0 for w in workers), "a worker gave up GSO"
    assert sum(w["tx_gso_runs"] for w in workers) > 0, "no GSO write happened"
