"""An attacker for the emulated testbed: forged LTP datagrams with spoofed sources, at two victims.

Run inside a host that takes no part in the attacked exchanges (the test uses the last worker's
namespace) while an LTP run trains::

    python -m tests.emulation.attacker --run RUN --session-id ID --iterations 40 \\
        --bytes 437544 --auth 1 --rate 400 --report attack.json

What lets a forged datagram reach its victim: the controller forwards on the destination MAC
alone (one exact-match flow per host MAC, no match on the input port, the source MAC or the
source IP), so any port may send a frame to any host; and a host accepts a spoofed source
address from its own subnet, which is on-link. So a raw socket (``IP_HDRINCL``) in any host's
namespace can send UDP "from" worker 0 (10.0.0.1:port) to the PS and "from" the PS
(10.0.0.254:port) to worker 0, and both map the datagrams to that peer by address.

The attacker knows the protocol, the layout (the model is public), the addresses, and the
session id (every datagram of the run carries it in the clear; the test passes it on the command
line), but no key. It builds its datagrams with the LTP core itself, through the binding's
C functions: a fake worker and a fake PS that talk to each other produce genuine-looking DATA,
ACK, CLOSE, HELLO and HELLO_ACK, sealed (with auth on) under a key of their own. Message ids are
sprayed over the whole run, since the attacker cannot see which iteration is running.

Every class of forgery leaves with its own IP TTL (``CLASS_TTL``), so the victims' ingress can
count what arrived of each (nftables) and the test can hold those counts against the counters of
the victims' transports. ``--report`` gets the number sent per (victim, class).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

from harness.running import keys
from harness.running.runfiles import RunFiles, read_jsonl
from topologies.incast import PS_IP, PS_NAME, worker_ip
from transports import native

# The classes of forgery, each marked with its own TTL on the wire (genuine traffic has 64).
CLASS_TTL = {"garbage": 70, "wrong_session": 71, "wrong_shape": 72, "far_ids": 73, "data": 74,
             "ack": 75, "close": 76, "hello": 77}
VICTIMS = ("ps", "worker")


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ip_udp(src: tuple[str, int], dst: tuple[str, int], payload: bytes, ttl: int) -> bytes:
    """An IPv4 datagram carrying one UDP datagram, from any source (UDP checksum 0: none)."""
    udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload
    head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), random.getrandbits(16), 0, ttl,
                       socket.IPPROTO_UDP, 0, socket.inet_aton(src[0]), socket.inet_aton(dst[0]))
    head = head[:10] + struct.pack("!H", _checksum(head)) + head[12:]
    return head + udp


class FakeEnd:
    """An LTP core the attacker drives by hand (sans-IO, through the binding's C functions)."""

    def __init__(self, rank: int, peer: int, session_id: int, auth: bool, key: bytes) -> None:
        self.ffi, self.lib = native._core()
        # Any message id, any shape, unpaced (everything due at once), keys never taken.
        cfg = native._config({"session_id": session_id, "auth": int(auth), "cc": 0,
                              "max_msg_bytes": 1 << 24, "rx_msg_window": 2**31,
                              "max_open_per_peer": 64, "max_tx_per_peer": 64})
        self.core = self.lib.ltp_core_new(cfg, rank)
        self.lib.ltp_core_add_peer(self.core, peer)
        if auth:
            self.lib.ltp_core_set_peer_key(self.core, 0, key, len(key))
        self.buf = self.ffi.new("uint8_t[]", 65536)
        self.slot = self.ffi.new("int *")
        self.now = 10_000_000
        self.keep: list[object] = []

    def send(self, msg_id: int, payload: np.ndarray) -> None:
        data = self.ffi.from_buffer(payload)
        self.keep.append((payload, data))
        self.lib.ltp_core_send(self.core, 0, msg_id, 0, data, payload.nbytes, 0, self.now)

    def release(self, msg_id: int) -> None:
        self.lib.ltp_core_send_release(self.core, 0, msg_id, 0)

    def hello(self) -> None:
        self.lib.ltp_core_hello(self.core, 0, self.now)

    def poll(self) -> list[bytes]:
        """Every datagram due now (the clock moves on by a millisecond first)."""
        self.now += 1000
        out = []
        while (n := self.lib.ltp_core_poll_tx(self.core, self.now, self.buf, 65536, self.slot)) > 0:
            out.append(bytes(self.ffi.buffer(self.buf, n)))
        return out

    def feed(self, datagrams: list[bytes]) -> None:
        for d in datagrams:
            self.lib.ltp_core_input(self.core, 0, d, len(d), self.now)


def _type(d: bytes) -> int:
    return d[3]   # docs/ltp-protocol.md §2: the type byte of the common header


def one_message(end: FakeEnd, msg_id: int, payload: np.ndarray) -> list[bytes]:
    """The DATA datagrams of one message from ``end``."""
    end.send(msg_id, payload)
    data = [d for d in end.poll() if _type(d) == 1]
    end.release(msg_id)
    return data


def build_pools(session_id: int, auth: bool, iterations: int, n_bytes: int,
                rng: random.Random, key: bytes | None = None) -> dict[str, dict[str, list[bytes]]]:
    """Forged datagrams by victim and class. The PS's are "from" worker 0 (rank 0), the worker's
    "from" the PS; sealed under ``key`` (an insider's own pair key), else under random bytes."""
    key = key or os.urandom(native.key_bytes())   # not the run's: the attacker does not know it
    ps_rank = native.rank_server()
    pools = {v: {c: [] for c in CLASS_TTL} for v in VICTIMS}
    fw = FakeEnd(0, ps_rank, session_id, auth, key)        # impersonates worker 0
    fp = FakeEnd(ps_rank, 0, session_id, auth, key)        # impersonates the PS
    other_w = FakeEnd(0, ps_rank, session_id ^ 1, auth, key)
    other_p = FakeEnd(ps_rank, 0, session_id ^ 1, auth, key)
    forged = np.full(n_bytes // 4, 1e3, np.float32)        # what a poisoner would like delivered
    short = np.full(n_bytes // 4 - 100, 1e3, np.float32)
    for t in range(iterations):
        for end, victim in ((fw, "ps"), (fp, "worker")):
            end.send(t, forged)
            data = [d for d in end.poll() if _type(d) == 1]
            end.release(t)
            pools[victim]["data"] += rng.sample(data, min(24, len(data)))
            other = fp if end is fw else fw
            other.feed(data[: len(data) // 3])               # part of it: the receiver ACKs
            pools["worker" if victim == "ps" else "ps"]["ack"] += [
                d for d in other.poll() if _type(d) == 2]
            other.feed(data)                                 # all of it: it closes
            pools["worker" if victim == "ps" else "ps"]["close"] += [
                d for d in other.poll() if _type(d) == 3]
            pools[victim]["far_ids"] += rng.sample(one_message(end, t + 100_000, forged), 4)
        for end, victim in ((other_w, "ps"), (other_p, "worker")):
            pools[victim]["wrong_session"] += rng.sample(one_message(end, t, forged), 4)
        for end, victim in ((fw, "ps"), (fp, "worker")):
            pools[victim]["wrong_shape"] += rng.sample(one_message(end, t + 50_000, short), 4)
    fw.hello()
    hello = [d for d in fw.poll() if _type(d) == 4]
    fp.feed(hello)
    pools["ps"]["hello"] = hello
    pools["worker"]["hello"] = [d for d in fp.poll() if _type(d) == 5]
    for victim in VICTIMS:
        pools[victim]["garbage"] = [bytes([0]) + rng.randbytes(rng.randrange(0, 1400))
                                    for _ in range(64)]
    return pools


def progress(files: RunFiles) -> int:
    """Iterations the PS has finished so far."""
    return len(read_jsonl(files.records(PS_NAME)))


def main(argv: list[str] | None = None) -> int:
    """Spray forgeries at both victims while the run trains; write what was sent."""
    p = argparse.ArgumentParser(prog="python -m tests.emulation.attacker")
    p.add_argument("--run", type=Path, required=True, help="the attacked run's folder")
    p.add_argument("--session-id", type=int, required=True, help="its session id (public)")
    p.add_argument(keys.FLAG, type=int, default=None, dest="keys_fd", metavar="N",
                   help="an insider: seal under the one pair key this host was handed (the key "
                        "of its own pair with the PS), read from inherited descriptor N")
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--bytes", type=int, required=True, help="the model's message size")
    p.add_argument("--auth", type=int, required=True, help="whether the run authenticates (1/0)")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--rate", type=float, default=400.0, help="forged datagrams per second")
    p.add_argument("--report", type=Path, required=True)
    args = p.parse_args(argv)
    rng = random.Random(12)
    files = RunFiles(args.run)
    session_id = args.session_id
    key = None
    if args.keys_fd is not None:
        held = keys.read_fd(args.keys_fd)
        key = held.key(held.holds()[0])[:native.key_bytes()]
    pools = build_pools(session_id, bool(args.auth), args.iterations, args.bytes, rng, key)
    targets = {"ps": ((worker_ip(0), args.port), (PS_IP, args.port)),
               "worker": ((PS_IP, args.port), (worker_ip(0), args.port))}
    sent = {v: {c: 0 for c in CLASS_TTL} for v in VICTIMS}
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    # Attack from the second iteration until a few before the last, so every forged datagram
    # reaches a live victim and is counted before the hosts report.
    deadline = time.monotonic() + 300
    while progress(files) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    gap = 1.0 / args.rate
    next_at = time.monotonic()
    while progress(files) < args.iterations - 5 and time.monotonic() < deadline:
        for victim in VICTIMS:
            cls = rng.choice(list(CLASS_TTL))
            src, dst = targets[victim]
            sock.sendto(ip_udp(src, dst, rng.choice(pools[victim][cls]), CLASS_TTL[cls]), (dst[0], 0))
            sent[victim][cls] += 1
        next_at += 2 * gap
        time.sleep(max(0.0, next_at - time.monotonic()))
    args.report.write_text(json.dumps(sent, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
