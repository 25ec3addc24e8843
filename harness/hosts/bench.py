"""The process of ``invoke bench-transport`` on each emulated host: synchronized pushes only.

Per iteration ``k``: the PS broadcasts a parameter-sized message; each worker pulls it and
reports ready; once every worker is ready the PS releases them all at one instant ``T`` and
gathers; every worker pushes one message of ``--bytes`` at once. The push time of the iteration is
``gather end - T``: all workers start together, as in the physical bound
``n_workers x bytes / bottleneck rate``. The barrier runs outside the emulated network (marker
files in the run folder, polled every 0.2 ms), so it costs the data plane nothing; the clock is
``time.monotonic()``, shared by every namespace of the machine.

    python -m harness.hosts.bench --role ps --transport ltp --workers 8 --bytes 437544 \
        --iterations 30 --folder RUN --port 5000 [--options JSON] [--keys-fd N]

``N``: an inherited pipe holding the cell's session id and this host's pair keys
(:mod:`harness.running.keys`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from harness.running import keys as handover
from harness.running.runfiles import HostSummary, Recorder, RunFiles
from topologies.incast import PS_IP, PS_NAME, worker_ip, worker_name
from transports import registry
from transports.base import Layout

POLL_S = 0.0002
TIMEOUT_S = 120.0


def _wait_for(paths: list[Path], deadline: float) -> None:
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{paths[0].name} and the others did not appear")
        time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    """Run one side of the benchmark; the PS writes ``FOLDER/push_times.json``."""
    p = argparse.ArgumentParser(prog="python -m harness.hosts.bench")
    p.add_argument("--role", choices=("ps", "worker"), required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--transport", required=True)
    p.add_argument("--options", default="{}", help="transport options as JSON")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--bytes", type=int, required=True, help="message size, a multiple of 4")
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--folder", type=Path, required=True)
    p.add_argument("--port", type=int, default=5000)
    p.add_argument(handover.FLAG, type=int, default=None, dest="keys_fd", metavar="N",
                   help="an inherited descriptor holding the cell's session and this host's keys")
    args = p.parse_args(argv)
    layout = Layout.single(args.bytes // 4)
    transport = registry.create(args.transport, json.loads(args.options))
    if args.keys_fd is not None:
        transport.use_session(handover.read_fd(args.keys_fd))
    ps_addr = (PS_IP, args.port)
    workers = [(worker_ip(r), args.port) for r in range(args.workers)]
    payload = np.random.default_rng(args.rank).standard_normal(layout.n_floats).astype(np.float32)
    files = RunFiles(args.folder)
    started = time.monotonic()
    sync = files.sync
    sync.mkdir(parents=True, exist_ok=True)
    if args.role == "ps":
        records = []
        with transport.serve(ps_addr, workers, layout) as end:
            end.wait_for_workers(TIMEOUT_S)
            for k in range(args.iterations):
                end.broadcast(k, payload, TIMEOUT_S)
                _wait_for([sync / f"ready-{k}-{r}" for r in range(args.workers)],
                          time.monotonic() + TIMEOUT_S)
                go = time.monotonic()
                (sync / f"go-{k}").touch()
                got = end.gather(k, TIMEOUT_S)
                done = time.monotonic()
                records.append({"iteration": k, "push_s": done - go,
                                "recv_frac": [d.received_frac for d in got]})
            stats = end.stats()
        files.push_times.write_text(json.dumps(
            {"records": records, "server_stats": stats}, indent=1))
        _summary(files, PS_NAME, "ps", args, stats, started)
    else:
        with transport.connect(args.rank, workers[args.rank], ps_addr, layout) as end, \
                open(files.records(worker_name(args.rank)), "x") as log:
            end.join(TIMEOUT_S)
            for k in range(args.iterations):
                end.pull(k, TIMEOUT_S)
                (sync / f"ready-{k}-{args.rank}").touch()
                _wait_for([sync / f"go-{k}"], time.monotonic() + TIMEOUT_S)
                t0 = time.monotonic()
                report = end.push(k, payload, TIMEOUT_S)
                log.write(json.dumps({"iteration": k, "push_call_s": time.monotonic() - t0,
                                      "packets": report.packets,
                                      "retransmits": report.retransmits,
                                      "wire_bytes": report.wire_bytes, **report.stats}) + "\n")
            # What the end reports after its pushes, e.g. a TCP socket's congestion control and
            # RTO: the settings the benchmark ran with, read back from the kernel.
            stats = end.stats()
        _summary(files, worker_name(args.rank), "worker", args, stats, started)
    return 0


def _summary(files: RunFiles, host: str, role: str, args: argparse.Namespace, stats: dict,
             started: float) -> None:
    Recorder(files, host).summary(HostSummary(
        host=host, role=role, iterations=args.iterations, elapsed_s=time.monotonic() - started,
        cpu_s=time.process_time(), transport_stats=stats, rank=args.rank if role == "worker" else -1,
        transport=args.transport, transport_options=json.loads(args.options)))


if __name__ == "__main__":
    sys.exit(main())
