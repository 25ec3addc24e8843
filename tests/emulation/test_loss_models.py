"""Loss models on the real testbed: Gilbert-Elliott meets its configured mean loss and mean burst
length as measured by the counters, per-host configuration touches only the hosts named, and the
eBPF programs go away with the configuration and with the testbed."""

import json
import subprocess
import sys
import time

import pytest

from tests.emulation.conftest import network
from topologies.impair import loss as impair
from topologies.impair.loss import GilbertElliott, Impairment, Uniform
from topologies.incast import PS_IP, IncastParams, intf
from topologies.testbed.network import Testbed

PACKETS = 40_000
# Paced UDP datagrams w1 -> ps1's discard port; a short pause every 10 keeps the sender from
# overrunning its own socket buffer (datagrams lost there would never reach the ingress).
SENDER = ("import socket,time\n"
          "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
          f"for i in range({PACKETS}):\n"
          f"    s.sendto(b'x'*200,('{PS_IP}',9))\n"
          "    time.sleep(0.00005) if i % 4 == 0 else None\n")


def settled(bed, host: str = "ps1", deadline_s: float = 10.0):
    """A snapshot once ``host`` has stopped receiving (the switch may still hold a backlog when
    the sender returns): two readings 0.1 s apart that agree."""
    last = bed.meter.snapshot()
    deadline = time.monotonic() + deadline_s
    while True:
        time.sleep(0.1)
        now = bed.meter.snapshot()
        if now.impair[host].arrived == last.impair[host].arrived:
            return now
        assert time.monotonic() < deadline, f"{host} kept receiving"
        last = now


def ge_programs(want: int | None = None, deadline_s: float = 5.0) -> int:
    """Gilbert-Elliott programs the kernel holds, machine-wide; with ``want``, once that many
    are (the kernel frees a detached program a moment later, not at once)."""
    deadline = time.monotonic() + deadline_s
    while True:
        out = subprocess.run([str(impair.ge_binary()), "count"], capture_output=True, text=True,
                             check=True).stdout
        if want is None or int(out) == want or time.monotonic() > deadline:
            return int(out)
        time.sleep(0.02)


@pytest.fixture(scope="class")
def bed(tmp_path_factory):
    impair.ge_binary()  # a missing build fails here with "run ./setup.sh"
    with network(IncastParams(n_workers=1), tmp_path_factory.mktemp("loss")) as tb:
        yield tb


class TestLossModels:
    def test_gilbert_elliott_meets_its_mean_loss_and_burst_length(self, bed):
        model = GilbertElliott.from_mean(5, 4)
        bed.ingress.configure(Impairment(model, seed=11))
        try:
            assert ge_programs(2) == 2  # ps1 and w1
            before = bed.meter.snapshot()
            bed.host_run("w1", sys.executable, "-c", SENDER)
            after = settled(bed)
            ge = impair.parse_ge_counters(bed.host_run("ps1", *impair.ge_argv("read", intf("ps1"))))
        finally:
            bed.ingress.configure(Impairment(0))
        ps = after.impair["ps1"]
        arrived = ps.arrived - before.impair["ps1"].arrived
        dropped = ps.dropped - before.impair["ps1"].dropped
        bursts = ps.bursts - before.impair["ps1"].bursts
        loss_pct, burst = 100 * dropped / arrived, dropped / bursts
        print(f"ge:5:4 at ps1: {dropped} of {arrived} packets dropped ({loss_pct:.2f} %) in {bursts} "
              f"bursts (mean {burst:.2f})")
        assert arrived > 0.7 * PACKETS  # the userspace switch drops some of a fast sender's
        # Bursty loss is noisier than uniform: with burst 4 the variance of the loss fraction is
        # ~6.6 times the binomial one, so its standard deviation over 40,000 packets is 0.28
        # points, and ~500 bursts give the mean burst a standard error of 0.15 packets. The bounds
        # are about 4 standard deviations.
        assert abs(loss_pct - 5.0) < 1.2
        assert abs(burst - 4.0) < 0.65
        # The nftables counters saw exactly what the chain decided: every marked packet dropped.
        assert ge["drops"] == ps.dropped and ge["packets"] == ps.arrived
        assert ge["bursts"] == ps.bursts
        # Over the whole run, the figures the runner records say the same.
        d = after.delta(before)
        assert d.loss_bursts >= bursts and d.mean_burst_pkts == pytest.approx(
            d.random_drops / d.loss_bursts)
        assert ge_programs(0) == 0  # uniform loss again: the programs are gone

    def test_per_host_configuration_touches_only_the_named_hosts(self, bed):
        bed.ingress.configure(Impairment("ge:20:2", seed=1), hosts=["ps1"])
        try:
            assert bed.ingress.applied["w1"].loss == Uniform(0.0)
            assert ge_programs(1) == 1
            before = bed.meter.snapshot()
            out = bed.host_run("w1", "ping", "-c", "200", "-i", "0.002", "-q", "-W", "1", PS_IP)
            after = settled(bed)
        finally:
            bed.ingress.configure(Impairment(0))
        d_ps = after.impair["ps1"].dropped - before.impair["ps1"].dropped
        d_w1 = after.impair["w1"].dropped - before.impair["w1"].dropped
        assert d_ps > 10 and d_w1 == 0, out
        assert "packet loss" in out

    def test_a_bad_host_name_changes_nothing(self, bed):
        with pytest.raises(Exception, match="no host 'w9'"):
            bed.ingress.configure(Impairment(5), hosts=["w9"])
        rules = bed.host_run("ps1", "nft", "-j", "list", "table", "netdev", impair.TABLE)
        assert "numgen" not in json.dumps(json.loads(rules))


def test_programs_go_with_the_testbed(tmp_path, clean_machine):
    with Testbed(IncastParams(n_workers=2), tmp_path) as tb:
        tb.ingress.configure(Impairment("ge:5:4"))
        assert ge_programs(3) == 3
    assert ge_programs(0) == 0
