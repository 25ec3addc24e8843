"""On/off UDP cross traffic: a seeded generator and a counting sink, run inside emulated hosts.

    python -m topologies.impair.onoff send --dst IP --port P --rate-mbps R --on-ms A --off-ms B
                                    [--size BYTES] [--seed S] [--dist const|exp] --report FILE
    python -m topologies.impair.onoff sink --bind IP --port P --report FILE

``send`` alternates between on periods, in which it sends ``size``-byte datagrams paced at
``rate_mbps`` (counting IP and UDP headers, 28 bytes, as the link does), and off periods, in
which it sends nothing. With ``--dist const`` every period lasts exactly its stated time and only
the phase of the first one is drawn from the seed (so several generators do not start in step);
with ``--dist exp`` each period's length is drawn from an exponential distribution with the
stated mean. Pacing works in ticks of about a millisecond: it sleeps to the next tick and sends
what is owed, so it costs little CPU at tens of Mbit/s. It binds its source port before it sends
anything, so the harness can tell it is up from its socket.

``sink`` binds a UDP socket and counts what arrives. Both run until SIGTERM or SIGINT (noticed
within 50 ms) and then write a JSON report (packets, bytes, seconds; the sender also its on
periods) to ``--report``.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import sys
import time

HEADER_BYTES = 28  # IPv4 + UDP
TICK_S = 0.001


POLL_S = 0.05        # how soon a signalled process notices
_stopping = False    # set by the signal handler; raising from it could split a send from its count


def _on_signal(signum, frame):
    global _stopping
    _stopping = True


def _write(path: str, report: dict) -> None:
    with open(path, "w") as f:
        json.dump(report, f)
        f.write("\n")


def send(dst: str, port: int, rate_mbps: float, on_s: float, off_s: float, size: int,
         seed: int, dist: str, report: str, src_port: int = 0) -> None:
    """The on/off sender (see the module docstring); returns when signalled."""
    rng = random.Random(seed)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", src_port))
    payload = b"\0" * size
    gap_s = (size + HEADER_BYTES) * 8 / (rate_mbps * 1e6)

    def length(mean_s: float) -> float:
        return rng.expovariate(1 / mean_s) if dist == "exp" and mean_s > 0 else mean_s

    sent = sent_bytes = periods = errors = 0
    t_start = time.monotonic()
    # A random phase: start somewhere inside one on+off cycle.
    phase = rng.uniform(0, on_s + off_s)
    on = phase < on_s
    period_end = t_start + (on_s - phase if on else on_s + off_s - phase)
    periods += on
    due = t_start  # when the next datagram is owed
    try:
        while not _stopping:
            now = time.monotonic()
            if now >= period_end:
                on = not on
                period_end = now + length(on_s if on else off_s)
                periods += on
                due = now
                continue
            if not on:
                time.sleep(min(period_end - now, POLL_S))
                continue
            due = max(due, now - 10 * TICK_S)  # after a stall, no catching up beyond 10 ms
            while due <= now:
                try:
                    sock.sendto(payload, (dst, port))
                    sent += 1
                    sent_bytes += size
                except OSError:
                    errors += 1  # a full buffer: the link is the limit, go on
                due += gap_s
            time.sleep(min(POLL_S, max(TICK_S, min(due, period_end) - time.monotonic())))
    finally:
        _write(report, {"role": "send", "packets": sent, "payload_bytes": sent_bytes,
                        "wire_bytes": sent_bytes + sent * HEADER_BYTES, "send_errors": errors,
                        "on_periods": periods, "seconds": time.monotonic() - t_start})


def sink(bind: str, port: int, report: str) -> None:
    """The counting sink (see the module docstring); returns when signalled."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind((bind, port))
    sock.settimeout(POLL_S)
    packets = payload = 0
    t_start = time.monotonic()
    try:
        while not _stopping:
            try:
                n = len(sock.recv(65536))
            except TimeoutError:
                continue
            packets += 1
            payload += n
    finally:
        _write(report, {"role": "sink", "packets": packets, "payload_bytes": payload,
                        "seconds": time.monotonic() - t_start})


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m topologies.impair.onoff")
    sub = parser.add_subparsers(dest="role", required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--src-port", type=int, default=0)
    s.add_argument("--rate-mbps", type=float, required=True)
    s.add_argument("--on-ms", type=float, required=True)
    s.add_argument("--off-ms", type=float, required=True)
    s.add_argument("--size", type=int, default=1400)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--dist", choices=("const", "exp"), default="const")
    s.add_argument("--report", required=True)
    k = sub.add_parser("sink")
    k.add_argument("--bind", required=True)
    k.add_argument("--port", type=int, required=True)
    k.add_argument("--report", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if args.role == "send":
        send(args.dst, args.port, args.rate_mbps, args.on_ms / 1000, args.off_ms / 1000,
             args.size, args.seed, args.dist, args.report, args.src_port)
    else:
        sink(args.bind, args.port, args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
