"""Benchmarks that print figures (never timed tests): the emulated network against its settings,
and the transports on loopback and on the emulated incast.

``invoke bench-transport`` first measures each scheme's loopback goodput and CPU per byte
(:mod:`harness.bench.loopback`), then, unless ``--loopback-only``, brings up the incast testbed
per bottleneck rate and times synchronized 8-to-1 pushes (:mod:`harness.hosts.bench`) against the
physical bound, with each scheme's own host settings applied.

``invoke bench-network`` brings up the 8-worker incast testbed and measures, with iperf3 on the
emulated hosts and the testbed's own counters:

1. one TCP flow w1 -> ps1 against the configured bottleneck rate;
2. 8-to-1 incast (one TCP flow from every worker at once): aggregate throughput, TCP
   retransmissions and bottleneck queue drops;
3. random loss: a paced UDP stream w1 -> ps1 with the loss rules on, measured loss (from the
   rules' counters at ps1) against the configured rate. (Not iperf3: its UDP mode starts with a
   single unretried datagram and hangs when loss takes it.)
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from harness.bench.names import FLOOR, MAC_PREFIX, mac_algorithm
from harness.running import results
from harness.running.runner import counter_deltas
from topologies.impair.loss import Impairment
from topologies.incast import PS_IP, PS_NAME, SUBNET, IncastParams, worker_name
from topologies.testbed.network import PROJECT_DIR, Testbed, TestbedError
from transports.base import UserError, check_options, parse_scheme
from transports.peer import PEER_PREFIX

BENCH_DIR = PROJECT_DIR / "results" / "bench"
BASE_PORT = 5201
LOOPBACK_PUSHES = 20
LOOPBACK_REPEATS = 5
# The loopback figures are also given as ratios to this scheme's, when it is benchmarked.
LOOPBACK_REFERENCE = "tcp-cubic"
# Paced UDP datagrams to the discard port of the PS (run inside w1).
UDP_SENDER = """
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t = time.monotonic()
for i in range({n}):
    s.sendto(b"x" * 1400, ("{ip}", 9))
    t += {gap_s}
    while time.monotonic() < t:
        pass
"""


class BenchError(UserError, ValueError):
    """A benchmark argument is out of range."""


def network_args(bandwidth_mbps: float, queue_pkts: int, loss_pct: float,
                 seconds: float) -> tuple[float, int, float, float]:
    """The arguments of :func:`network`, validated (one sentence on a bad one)."""
    IncastParams(8, bandwidth_mbps, None, queue_pkts, loss_pct)
    if not 0.5 <= seconds <= 600:
        raise BenchError(f"--seconds must be from 0.5 to 600, not {seconds!r}.")
    return bandwidth_mbps, queue_pkts, loss_pct, seconds


def transport_args(slugs, losses, bandwidths, iterations: int, queue_pkts: int,
                   loopback_only: bool = False, repeats: int = LOOPBACK_REPEATS) -> tuple:
    """The arguments of :func:`transport`, validated (one sentence on a bad one).

    ``loopback_only`` keeps the incast settings' validation but returns no bandwidths, so only
    the loopback part runs. ``repeats``: repetitions of the loopback part.
    """
    from transports import registry

    for name, values in (("--transports", slugs), ("--loss", losses), ("--bandwidth", bandwidths)):
        if not values:
            raise BenchError(f"{name} needs at least one value.")
        if len(set(values)) != len(values):
            raise BenchError(f"{name} names a value more than once.")
    for slug in slugs:
        if slug == FLOOR:   # the kernel's part of a UDP path, no transport: loopback only
            if not loopback_only:
                raise BenchError(f"{slug} times the kernel's UDP path alone, on loopback only: "
                                 "add --loopback-only.")
            continue
        if slug.startswith(MAC_PREFIX):   # the MAC alone, no transport: loopback only
            if not loopback_only:
                raise BenchError(f"{slug} times the MAC alone, on loopback only: add "
                                 "--loopback-only.")
            try:
                mac_algorithm(slug)
            except ValueError as exc:
                raise BenchError(str(exc)) from None
            continue
        if slug.startswith(PEER_PREFIX):   # a peer-to-peer transport, timed on loopback only
            if not loopback_only:
                raise BenchError(f"{slug} is a peer-to-peer transport, timed on loopback only: "
                                 "add --loopback-only.")
            from transports import peer

            name, options = peer.parse(slug[len(PEER_PREFIX):])
            check_options(peer.SCHEMES[name].OPTIONS, options, name, what="peer transport")
            continue
        name, options = parse_scheme(slug)
        registry.create(name, options)   # unknown slug or bad option: one sentence, nothing run
    for bw in bandwidths:
        for loss in losses:
            IncastParams(8, bw, None, queue_pkts, loss)
    if not 1 <= iterations <= 10_000:
        raise BenchError(f"--iterations must be from 1 to 10000, not {iterations!r}.")
    if not 1 <= repeats <= 100:
        raise BenchError(f"--repeats must be from 1 to 100, not {repeats!r}.")
    return (slugs, losses, () if loopback_only else bandwidths, iterations, queue_pkts, None,
            repeats)


def push_bound_s(workers: int, n_bytes: int, bandwidth_mbps: float) -> float:
    """The physical bound of a synchronized push: every worker's message through the bottleneck
    (payload only)."""
    return workers * n_bytes * 8 / (bandwidth_mbps * 1e6)


def listening_in(host_pid: int, port: int) -> bool:
    """True if a TCP socket listens on ``port`` in the network namespace of ``host_pid``."""
    want = f":{port:04X}"
    with open(f"/proc/{host_pid}/net/tcp") as f:
        return any(line.split()[1].endswith(want) and line.split()[3] == "0A"
                   for line in f.readlines()[1:])


def _iperf(tb: Testbed, folder: Path, pairs: list[tuple[str, int]],
           seconds: float) -> tuple[list[dict], float]:
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
        while not all(listening_in(ps_pid, port) for _, port in pairs):
            if time.monotonic() > deadline:
                raise TestbedError("iperf3 servers on ps1 did not listen within 10 s.")
            time.sleep(0.02)
        for host, port in pairs:
            argv = ["iperf3", "-c", PS_IP, "-p", str(port), "-t", f"{seconds:g}", "-J", "-C", "cubic"]
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

        before = tb.meter.snapshot()
        (one,), _ = _iperf(tb, folder / "one-flow", [(worker_name(0), BASE_PORT)], seconds)
        d = counter_deltas(before, tb.meter.snapshot())
        got = one["end"]["sum_received"]["bits_per_second"] / 1e6
        print(f"one TCP flow:     {got:7.1f} Mbit/s  = {got / bandwidth_mbps:5.1%} of configured "
              f"(CUBIC), {one['end']['sum_sent']['retransmits']} retransmissions, "
              f"{d['queue_drops']} queue drops")

        before = tb.meter.snapshot()
        flows, span_s = _iperf(tb, folder / "incast",
                               [(worker_name(r), BASE_PORT + r) for r in range(8)], seconds)
        d = counter_deltas(before, tb.meter.snapshot())
        # Aggregate over the union of the flows' lifetimes, so staggered starts do not inflate it.
        total = sum(f["end"]["sum_received"]["bytes"] for f in flows) * 8 / span_s / 1e6
        each = [f["end"]["sum_received"]["bits_per_second"] / 1e6 for f in flows]
        retrans = sum(f["end"]["sum_sent"]["retransmits"] for f in flows)
        print(f"8-to-1 incast:    {total:7.1f} Mbit/s  = {total / bandwidth_mbps:5.1%} of configured "
              f"(per flow {min(each):.1f}-{max(each):.1f}), {retrans} retransmissions, "
              f"{d['queue_drops']} queue drops (pfifo itself counted {d['queue_drops_tc']})")

        tb.ingress.configure(Impairment(loss_pct))
        before = tb.meter.snapshot()
        rate_mbps = min(20.0, bandwidth_mbps / 4)
        n_packets = max(2000, int(rate_mbps * 1e6 * seconds / (1400 * 8)))
        tb.host_run(worker_name(0), sys.executable, "-c", UDP_SENDER.format(
            n=n_packets, gap_s=1400 * 8 / (rate_mbps * 1e6), ip=PS_IP))
        after = tb.meter.snapshot()
        ps = {k: getattr(after.impair[PS_NAME], k) - getattr(before.impair[PS_NAME], k)
              for k in ("arrived", "dropped")}
        measured = 100.0 * ps["dropped"] / ps["arrived"] if ps["arrived"] else float("nan")
        print(f"random loss:      {measured:7.2f} %  measured by the rules at ps1 "
              f"({ps['dropped']} of {ps['arrived']} packets of a {rate_mbps:g} Mbit/s UDP "
              f"stream), configured {loss_pct:g} %")



def mlp_bytes() -> int:
    """One gradient of the MLP the testbed trains, in bytes (its owner: the model registry)."""
    from harness.training import models

    return 4 * models.n_params("mlp")


def _spread(x, fmt: str) -> str:
    """A :class:`~harness.bench.loopback.Spread` as "median [min, max]", "-" for None."""
    return "-" if x is None else f"{x.median:{fmt}} [{x.low:{fmt}}, {x.high:{fmt}}]"


def loopback(slugs: tuple[str, ...], folder: Path, n_bytes: int | None = None,
             pushes: int = LOOPBACK_PUSHES, repeats: int = LOOPBACK_REPEATS,
             redo: str | None = None) -> None:
    """Run the loopback pushes of every scheme (``n_bytes`` per push, the MLP's gradient unless
    given, then 4 MiB), ``repeats`` interleaved repetitions, into ``folder`` through the sweep
    loop (kind ``loopback``: it resumes; ``redo`` as run-sweep's ``--redo``), then print each
    scheme's goodput and CPU per byte over the folder's repetitions, with their ratios to
    :data:`LOOPBACK_REFERENCE`'s."""
    n_bytes = n_bytes or mlp_bytes()
    from harness.bench import kind
    from harness.bench.loopback import from_tables, summary
    from harness.reporting.report import counted
    from harness.running import engine

    sizes = (n_bytes, 4 * 1024 * 1024)
    engine.run_plan(kind.plan(slugs, sizes, pushes, repeats), folder,
                    redo=engine.parse_redo(redo))

    reference = LOOPBACK_REFERENCE if LOOPBACK_REFERENCE in slugs else None
    print(f"loopback, one worker -> PS over 127.0.0.1: {counted(repeats, 'repetition')} of "
          f"{pushes} pushes "
          "per scheme and size, the schemes interleaved; per repetition the goodput of its median "
          "push and the CPU seconds of the process per GB pushed (both ends, user + system); "
          "median [min, max] over the repetitions"
          + (f"; x {reference}: the ratio to {reference}'s in the same repetition" if reference
             else ""))
    ref = reference or "ref"
    print(f"  {'bytes':>9} {'transport':<22} {'Gbit/s':>20} {'CPU s/GB':>21} "
          f"{'goodput x ' + ref:>20} {'CPU x ' + ref:>20}")
    pushed = [run for run in from_tables(folder) if run.scheme in slugs]
    for size in sizes:
        for s in summary([run for run in pushed if run.n_bytes == size], reference):
            print(f"  {size:>9,} {s.scheme:<22} {_spread(s.goodput_gbps, '.2f'):>20} "
                  f"{_spread(s.cpu_s_per_gb, '.3f'):>21} {_spread(s.goodput_ratio, '.2f'):>20} "
                  f"{_spread(s.cpu_ratio, '.2f'):>20}")
    print("  the machine's load moves both figures from minute to minute: compare schemes within "
          f"one run of this command (tables in {folder})")


@dataclasses.dataclass
class Cell:
    """One incast cell of the benchmark: its status and, if it finished, its push times."""

    status: str                      # "ok", "timeout" or "crash"
    reason: str
    push_s: list[float]
    recv_frac: list[float]
    routes_before: dict[str, str]    # every host's route to the subnet as the cell started ...
    routes_after: dict[str, str]     # ... and as it ended (the scheme's host settings in force)


def _routes(tb: Testbed) -> dict[str, str]:
    """Every host's route to the testbed's subnet, as ``ip route`` shows it."""
    return {h: tb.host_run(h, "ip", "route", "show", SUBNET).strip() for h in tb.host_names()}


def run_cell(tb: Testbed, zygote, cell: Path, slug: str, iterations: int,
             n_bytes: int | None = None, workers: int = 8) -> Cell:
    """Run one cell: apply ``slug``'s host settings, then synchronized ``workers``-to-1 pushes
    (the first ``workers`` hosts of the testbed; the others stay idle).

    Each host's summary (``RunFiles(cell).host_summary``) holds what its transport end reported,
    e.g. the congestion control and RTO of a TCP worker's socket.
    """
    from harness.running import keys as handover
    from harness.running.runfiles import RunFiles
    from harness.running.runner import apply_host_settings, launched, spawn_forked, wait
    from transports import registry
    from transports.base import Session

    n_bytes = n_bytes or mlp_bytes()

    name, options = parse_scheme(slug)
    # The scheme's own per-host settings (tcp-cubic-lowrto's minimum RTO).
    apply_host_settings(tb, registry.create(name, options))
    before = _routes(tb)
    files = RunFiles(cell)
    cell.mkdir(parents=True, exist_ok=True)
    keys = handover.blobs(handover.run_keys(Session.draw(), "ps", workers))   # one per cell
    base = ["--transport", name, "--options", json.dumps(options), "--workers", str(workers), "--bytes",
            str(n_bytes), "--iterations", str(iterations), "--folder", str(cell)]
    commands = {PS_NAME: ("harness.hosts.bench", base + ["--role", "ps"], files.log(PS_NAME))}
    for r in range(workers):
        commands[worker_name(r)] = ("harness.hosts.bench",
                                    base + ["--role", "worker", "--rank", str(r)],
                                    files.log(worker_name(r)))
    with launched(spawn_forked(tb, zygote), commands, keys) as procs:
        status, reason = wait(procs, time.monotonic() + 60 + 30 * iterations)
    after = _routes(tb)
    if status != "ok":
        return Cell(status, reason, [], [], before, after)
    recs = json.loads(files.push_times.read_text())["records"]
    return Cell(status, reason, [r["push_s"] for r in recs],
                [min(r["recv_frac"]) for r in recs], before, after)


def transport(slugs: tuple[str, ...], losses: tuple[float, ...], bandwidths: tuple[float, ...],
              iterations: int, queue_pkts: int, n_bytes: int | None = None,
              repeats: int = LOOPBACK_REPEATS, out: Path | None = None,
              redo: str | None = None) -> None:
    """Loopback goodput and CPU per byte (``repeats`` repetitions), then synchronized 8-to-1 push
    times on the emulated incast vs the bound (no incast part when ``bandwidths`` is empty), into
    ``out`` (default: a new folder under :data:`BENCH_DIR`; a folder given again resumes its
    loopback runs, ``redo`` as run-sweep's ``--redo``)."""
    import numpy as np

    from harness.hosts.zygote import Zygote

    n_bytes = n_bytes or mlp_bytes()
    folder = out or BENCH_DIR / time.strftime("transport-%Y%m%dT%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    loopback(slugs, folder, n_bytes, repeats=repeats, redo=redo)
    if not bandwidths:
        return

    rows = []
    print(f"\nemulated incast: 8 workers x {n_bytes:,} B pushed at once, queue {queue_pkts} packets, "
          f"{iterations} iterations per cell (raw output in {folder})")
    print(f"  {'Mbit/s':>6} {'loss %':>6} {'transport':<22} {'median s':>9} {'p99 s':>8} "
          f"{'bound s':>8} {'median/bound':>12} {'p99/bound':>9} {'min frac':>8}")
    for bw in bandwidths:
        net_dir = folder / f"bw{bw:g}"
        bound_s = push_bound_s(8, n_bytes, bw)
        with Testbed(IncastParams(8, bw, None, queue_pkts, 0.0), net_dir) as tb, \
                Zygote(net_dir, tb.ledger) as zygote:
            for loss in losses:
                tb.ingress.configure(Impairment(loss))
                for slug in slugs:
                    got = run_cell(tb, zygote, net_dir / f"{slug}-loss{loss:g}", slug, iterations,
                                   n_bytes)
                    if got.status != "ok":
                        print(f"  {bw:>6g} {loss:>6g} {slug:<22} {got.status}: {got.reason[:80]}")
                        continue
                    push = np.array(got.push_s)
                    frac = min(got.recv_frac)
                    med, p99 = float(np.median(push)), float(np.percentile(push, 99))
                    rows.append({"bottleneck_mbps": bw, "loss_pct": loss, "transport": slug,
                                 "median_s": med, "p99_s": p99, "bound_s": bound_s,
                                 "min_recv_frac": frac})
                    print(f"  {bw:>6g} {loss:>6g} {slug:<22} {med:9.3f} {p99:8.3f} {bound_s:8.3f} "
                          f"{med / bound_s:12.2f} {p99 / bound_s:9.2f} {frac:8.3f}")
    results.append_rows(folder / "push_times.csv", results.BENCH_PUSH_COLUMNS, rows)
