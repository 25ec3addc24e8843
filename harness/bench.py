"""Benchmarks that print figures (never timed tests): the emulated network against its settings.

``invoke bench-network`` brings up the 8-worker incast testbed and measures, with iperf3 on the
emulated hosts and the testbed's own counters:

1. one TCP flow w1 -> ps1 against the configured bottleneck rate;
2. 8-to-1 incast (one TCP flow from every worker at once): aggregate throughput, TCP
   retransmissions and bottleneck queue drops;
3. random loss: a UDP stream w1 -> ps1 with the loss rules on, measured loss (from the rules'
   counters and from iperf3's own count) against the configured rate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness.runner import counter_deltas
from topologies.incast import PS_IP, PS_NAME, IncastParams, worker_name
from topologies.network import PROJECT_DIR, Testbed, TestbedError

BENCH_DIR = PROJECT_DIR / "results" / "bench"
BASE_PORT = 5201


def _listening_in(host_pid: int, port: int) -> bool:
    """True if a TCP socket listens on ``port`` in the network namespace of ``host_pid``."""
    want = f":{port:04X}"
    with open(f"/proc/{host_pid}/net/tcp") as f:
        return any(line.split()[1].endswith(want) and line.split()[3] == "0A"
                   for line in f.readlines()[1:])


def _iperf(tb: Testbed, folder: Path, pairs: list[tuple[str, int]], seconds: float,
           udp_mbps: float | None = None) -> tuple[list[dict], float]:
    """Run one iperf3 client per (worker, port) against servers on the PS.

    Returns their JSON reports and the span from starting the first client to the last one's
    exit (clients start one after another, so their own windows do not coincide).
    """
    servers, clients = [], []
    ps_pid = tb.host(PS_NAME).pid
    try:
        for _, port in pairs:
            servers.append(tb.start_process(PS_NAME, ["iperf3", "-s", "-1", "-B", PS_IP, "-p", str(port)],
                                            folder / f"iperf3-server-{port}.log"))
        deadline = time.monotonic() + 10
        while not all(_listening_in(ps_pid, port) for _, port in pairs):
            if time.monotonic() > deadline:
                raise TestbedError("iperf3 servers on ps1 did not listen within 10 s.")
            time.sleep(0.02)
        for host, port in pairs:
            argv = ["iperf3", "-c", PS_IP, "-p", str(port), "-t", f"{seconds:g}", "-J", "-C", "cubic"]
            if udp_mbps is not None:
                argv += ["-u", "-b", f"{udp_mbps:g}M", "-l", "1400"]
            if not clients:
                t0 = time.monotonic()
            clients.append(tb.start_process(host, argv, folder / f"iperf3-{host}-{port}.json"))
        deadline = time.monotonic() + seconds + 30
        while any(c.poll() is None for c in clients):
            if time.monotonic() > deadline:
                raise TestbedError("iperf3 clients did not finish in time.")
            time.sleep(0.01)
        span_s = time.monotonic() - t0
        return [json.loads(c.log_path.read_text()) for c in clients], span_s
    finally:
        for p in servers + clients:
            p.kill()


def network(bandwidth_mbps: float, queue_pkts: int, loss_pct: float, seconds: float) -> None:
    """Measure and print the three figures described in the module docstring."""
    params = IncastParams(8, bandwidth_mbps, None, queue_pkts, 0.0)
    IncastParams(8, bandwidth_mbps, None, queue_pkts, loss_pct)  # validate before starting
    folder = BENCH_DIR / time.strftime("network-%Y%m%dT%H%M%S")
    with Testbed(params, folder) as tb:
        print(f"8 workers -> 1 PS, bottleneck {bandwidth_mbps:g} Mbit/s, queue {queue_pkts} packets"
              f" (raw output in {folder})")

        before = tb.snapshot()
        (one,), _ = _iperf(tb, folder / "one-flow", [(worker_name(0), BASE_PORT)], seconds)
        d = counter_deltas(before, tb.snapshot(), 8)
        got = one["end"]["sum_received"]["bits_per_second"] / 1e6
        print(f"one TCP flow:     {got:7.1f} Mbit/s  = {got / bandwidth_mbps:5.1%} of configured "
              f"(CUBIC), {one['end']['sum_sent']['retransmits']} retransmissions, "
              f"{d['queue_drops']} queue drops")

        before = tb.snapshot()
        flows, span_s = _iperf(tb, folder / "incast",
                               [(worker_name(r), BASE_PORT + r) for r in range(8)], seconds)
        d = counter_deltas(before, tb.snapshot(), 8)
        # Aggregate over the union of the flows' lifetimes, so staggered starts do not inflate it.
        total = sum(f["end"]["sum_received"]["bytes"] for f in flows) * 8 / span_s / 1e6
        each = [f["end"]["sum_received"]["bits_per_second"] / 1e6 for f in flows]
        retrans = sum(f["end"]["sum_sent"]["retransmits"] for f in flows)
        print(f"8-to-1 incast:    {total:7.1f} Mbit/s  = {total / bandwidth_mbps:5.1%} of configured "
              f"(per flow {min(each):.1f}-{max(each):.1f}), {retrans} retransmissions, "
              f"{d['queue_drops']} queue drops (pfifo itself counted {d['queue_drops_tc']})")

        tb.set_loss(loss_pct)
        before = tb.snapshot()
        (udp,), _ = _iperf(tb, folder / "loss", [(worker_name(0), BASE_PORT)], seconds,
                        udp_mbps=min(20.0, bandwidth_mbps / 4))
        after = tb.snapshot()
        ps = {k: after["impair"][PS_NAME][k] - before["impair"][PS_NAME][k]
              for k in ("arrived", "dropped")}
        measured = 100.0 * ps["dropped"] / ps["arrived"] if ps["arrived"] else float("nan")
        print(f"random loss:      {measured:7.2f} %  measured by the rules at ps1 "
              f"({ps['dropped']} of {ps['arrived']} packets), iperf3 saw "
              f"{udp['end']['sum']['lost_percent']:.2f} %, configured {loss_pct:g} %")
