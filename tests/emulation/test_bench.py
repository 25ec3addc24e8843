"""``invoke bench-transport`` runs every scheme with its own settings in force on the emulated
incast: the settings that define a scheme are read back from the kernel while its cell runs.

- every host's route to the subnet, as the cell starts and as it ends: ``rto_min`` exactly for
  ``tcp-cubic-lowrto`` (set by its host commands), and gone again for the cells after it;
- every TCP worker's socket after its pushes: the congestion control in effect
  (``TCP_CONGESTION``) and the RTO (``TCP_INFO``), under 50 ms only with the lowered minimum;
- every LTP end: Ethernet-sized datagrams (the emulated path's MTU is 1500; loopback's would
  give 64 KB).

Each cell pushes twice; the whole module takes about a minute after the testbed is up.
"""

import re
from pathlib import Path

import pytest

from harness import bench
from harness.runfiles import RunFiles
from harness.zygote import Zygote
from topologies.incast import PS_NAME, IncastParams, worker_name
from topologies.network import Testbed
from transports import registry

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
            out[slug] = (bench.run_cell(tb, zygote, folder / slug, slug, iterations=2),
                         RunFiles(folder / slug))
    return out


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
                assert stats["rto_ms"] < 50, host
        else:
            assert stats["datagram_bytes"] == 1472, host
