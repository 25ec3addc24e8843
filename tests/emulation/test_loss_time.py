"""The time-based Gilbert-Elliott chain on the real testbed: a paced stream of 4,000 datagrams a
second meets the configured mean loss, and the chain's counters its mean bad period, while a
sparse flow in the other direction (a datagram every 50 ms, like a sender in timeout) loses
about the mean too, one datagram at a time rather than in runs."""

import json
import sys
import time

import pytest

from tests.emulation.conftest import network
from tests.emulation.test_loss_models import ge_programs, settled
from topologies.impair import loss as impair
from topologies.impair.loss import GilbertElliottTime, Impairment
from topologies.incast import PS_IP, IncastParams, intf

PORT = 9000
MODEL = GilbertElliottTime.from_mean(10, 2)  # get:loss=10,burst_ms=2: good periods of 18 ms
DENSE_RATE, DENSE_S = 4000, 15
SPARSE_MS = 50
SPARSE_N = DENSE_S * 1000 // SPARSE_MS

# Datagrams numbered from 0, each sent at its time on an absolute schedule (a late one goes at
# once), so the rate holds whatever a sleep overshoots.
SENDER = ("import socket,sys,time\n"
          "dst,n,gap=sys.argv[1],int(sys.argv[2]),float(sys.argv[3])\n"
          "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
          "t0=time.monotonic()\n"
          "for i in range(n):\n"
          "    wait=t0+i*gap-time.monotonic()\n"
          "    time.sleep(wait) if wait>0 else None\n"
          f"    s.sendto(i.to_bytes(4,'big')+bytes(196),(dst,{PORT}))\n")
# Binds the port (so no ICMP unreachable answers travel back through the other host's chain),
# says so, records every datagram's number, and ends 2 s after the last one.
RECEIVER = ("import json,socket\n"
            "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,4<<20)\n"
            f"s.bind(('0.0.0.0',{PORT}))\n"
            "print('ready',flush=True)\n"
            "s.settimeout(60)\n"
            "seen=[]\n"
            "try:\n"
            "    while True:\n"
            "        seen.append(int.from_bytes(s.recv(2048)[:4],'big'))\n"
            "        s.settimeout(2)\n"
            "except socket.timeout:\n"
            "    pass\n"
            "print(json.dumps(seen),flush=True)\n")


def wait_for(proc, pred, what: str, deadline_s: float):
    """The log text of ``proc`` once ``pred(text)`` holds; fail after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while True:
        text = proc.log_path.read_text() if proc.log_path.exists() else ""
        if pred(text):
            return text
        assert time.monotonic() < deadline, f"{proc.host}: {what} within {deadline_s:g} s: {text}"
        time.sleep(0.05)


def runs_of_losses(seen: list[int], sent: int) -> list[int]:
    """Lengths of the runs of consecutive datagram numbers missing from ``seen``."""
    got, runs, run = set(seen), [], 0
    for i in range(sent):
        if i in got:
            if run:
                runs.append(run)
            run = 0
        else:
            run += 1
    return runs + ([run] if run else [])


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    impair.ge_binary()  # a missing build fails here with "run ./setup.sh"
    with network(IncastParams(n_workers=1), tmp_path_factory.mktemp("loss-time")) as tb:
        yield tb


def test_time_chain_meets_its_loss_and_periods_and_spares_a_sparse_flow(bed, tmp_path):
    procs = []

    def start(host, code, *args):
        proc = bed.start_process(host, [sys.executable, "-c", code, *args],
                                 tmp_path / f"{host}-{len(procs)}.log")
        procs.append(proc)
        return proc

    bed.ingress.configure(Impairment(MODEL, seed=5))
    try:
        assert ge_programs(2) == 2  # ps1 and w1
        rx_ps, rx_w1 = start("ps1", RECEIVER), start("w1", RECEIVER)
        for rx in (rx_ps, rx_w1):
            wait_for(rx, lambda t: t.startswith("ready"), "a bound receiver", 10)
        before = bed.meter.snapshot()
        sparse = start("ps1", SENDER, bed.host_ips()["w1"], str(SPARSE_N), str(SPARSE_MS / 1000))
        bed.host_run("w1", sys.executable, "-c", SENDER, PS_IP, str(DENSE_RATE * DENSE_S),
                     str(1 / DENSE_RATE))
        wait_for(sparse, lambda t: sparse.poll() is not None, "the sparse sender's end", 10)
        assert sparse.poll() == 0, sparse.log_path.read_text()
        settled(bed, "ps1")
        after = settled(bed, "w1")
        ge = {h: impair.parse_ge_counters(bed.host_run(h, *impair.ge_argv("read", intf(h))))
              for h in ("ps1", "w1")}
        seen_w1 = json.loads(wait_for(rx_w1, lambda t: t.count("\n") >= 2, "the receiver's end",
                                      10).splitlines()[1])
    finally:
        for proc in procs:
            proc.kill()
        bed.ingress.configure(Impairment(0))
    assert ge_programs(0) == 0

    n = {h: {k: getattr(after.impair[h], k) - getattr(before.impair[h], k)
             for k in ("arrived", "dropped", "bursts", "bad_periods", "bad_ns")}
         for h in ("ps1", "w1")}
    ps, w1 = n["ps1"], n["w1"]
    loss_ps = 100 * ps["dropped"] / ps["arrived"]
    bad_ms = {h: n[h]["bad_ns"] / n[h]["bad_periods"] / 1e6 for h in n}
    share_ps = 100 * ge["ps1"]["bad_ns"] / (ge["ps1"]["bad_ns"] + ge["ps1"]["good_ns"])
    runs = runs_of_losses(seen_w1, SPARSE_N)
    loss_w1 = 100 * (SPARSE_N - len(set(seen_w1))) / SPARSE_N
    print(f"{MODEL.text()}: dense ps1 {ps['dropped']}/{ps['arrived']} lost ({loss_ps:.2f} %), "
          f"{ps['bursts']} bursts (mean {ps['dropped'] / ps['bursts']:.2f} packets), "
          f"{ps['bad_periods']} bad periods of {bad_ms['ps1']:.3f} ms mean, bad share of time "
          f"{share_ps:.2f} %; sparse w1 {SPARSE_N - len(set(seen_w1))}/{SPARSE_N} lost "
          f"({loss_w1:.2f} %), runs {sorted(runs)}, w1 bad periods {w1['bad_periods']} of "
          f"{bad_ms['w1']:.3f} ms mean")

    # The dense stream. Over 200 simulated seeds at these figures (tests/unit/test_loss_time.py
    # runs the same chain), loss had a standard deviation of 0.43 points and the mean bad period
    # one of 0.07 ms; the bounds are about 4 of them.
    assert ps["arrived"] > 0.9 * DENSE_RATE * DENSE_S
    assert abs(loss_ps - MODEL.mean_loss_pct) < 1.8
    assert abs(bad_ms["ps1"] - MODEL.bad_ms) < 0.3
    # The packets lost are the time spent bad: 0.02 points apart (standard deviation) in
    # simulation, where arrivals are evenly spaced, 0.3 in the first run here, where the switch
    # and a loaded sender bunch them up, so they sample the time less evenly.
    assert abs(loss_ps - share_ps) < 1.0
    # The nftables counters saw exactly what the chain decided.
    assert (ge["ps1"]["drops"], ge["ps1"]["packets"]) == (after.impair["ps1"].dropped,
                                                          after.impair["ps1"].arrived)

    # The sparse flow: 300 datagrams, loss standard deviation 1.8 points. Bad periods last 2 ms
    # and datagrams come every 50 ms, so each sees the chain afresh: runs of losses are
    # geometric with mean 1/(1 - 0.1) = 1.11 (at most 1.33 over 200 simulated seeds); a chain
    # that moved per packet at the dense stream's burst of 8.5 packets would hold it 425 ms.
    assert abs(loss_w1 - MODEL.mean_loss_pct) < 7
    assert runs and sum(runs) / len(runs) < 1.6 and max(runs) <= 5
    assert w1["arrived"] == len(seen_w1) + w1["dropped"]  # nothing else reached w1
    assert abs(bad_ms["w1"] - MODEL.bad_ms) < 0.3

    # The figures the runner records say the same.
    d = after.delta(before)
    assert d.bad_periods == ps["bad_periods"] + w1["bad_periods"]
    assert d.mean_bad_ms == pytest.approx((ps["bad_ns"] + w1["bad_ns"])
                                          / d.bad_periods / 1e6)
