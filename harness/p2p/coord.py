"""The round coordinator: when a peer may start a round, and whom it sends to in it.

It runs in the sweep's process, in the root namespace, next to the controller, and the peers
reach it over a Unix socket (a file: every network namespace sees it, and the emulated links
carry only training traffic). Each peer keeps one connection and asks, once per round,
``{"op": "sync", "rank": r, "round": t}``, meaning "I have sent round t-1; may I start round t,
and to whom do I send?". The answer: ``receivers`` (ranks), ``group`` (the sender's multicast
address when the switches copy, else null), ``rate_mbps`` (the pace) and ``stop``.

**BSP.** The answer to round ``t`` comes when every peer has asked for it, so every round ``t-1``
message has been delivered (a send returns once every receiver has closed it): the round barrier.
Then the coordinator asks the controller for the whole round at once
(:meth:`topologies.controller.multicast.MulticastClient.round`): the senders in an order that
rotates every round (so no peer is always the one that sees everyone else's trees as load), one
view of the links, all groups installed with one barrier per switch, the datapaths settled.

**SSP with bound s.** A peer may start round ``t`` once every peer has asked for round
``t - s`` or later; its receivers are chosen and installed for it alone, when it asks (the
controller's plan then holds whoever asked in the same round). A sender's group changes only
between its own sends, never under a message in flight.

Both end with a barrier: the answer to round ``rounds`` (``stop``) comes when every peer has
sent its last round, so nobody leaves while a message to it is on its way.

**The pace.** Each selection comes with the sender's pace
(:func:`topologies.controller.selmcast.paces`): every link's available bandwidth shared equally
among the transfers of the round that cross it, a group at its most shared link, unicast copies
each as a transfer of its own. Every policy is paced by the same rule, on the same view.

Every round's plan is one line of ``raw/rounds.jsonl``; when the switches copy, the OpenFlow
groups as the switches hold them once the round's plan is installed are one line of
``raw/groups.jsonl`` (each group's switch, sender, address and buckets, by the port and the next
hop each bucket copies toward; the structure, not the counters, which lag the datapath).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path

from harness.hosts.sync import parse_sync
from harness.p2p.spec import PeerSpec
from harness.training import models
from topologies.controller.mcast_plan import group_address
from topologies.controller.multicast import MulticastClient
from topologies.incast import worker_name

RATE_FLOOR_MBPS = 1.0
PLAN_WAIT_S = 0.05


class Coordinator:
    """Serves the peers' ``sync`` requests on ``sock_path`` (one thread per peer)."""

    def __init__(self, spec: PeerSpec, mcast: MulticastClient, sock_path: Path,
                 log_path: Path, ips: list[str]) -> None:
        self.spec = spec
        self.mcast = mcast
        self.sock_path = Path(sock_path)
        self.log_path = Path(log_path)
        self.ips = ips
        self.n = spec.n_workers
        self.names = [worker_name(r) for r in range(self.n)]
        self.bound = parse_sync(spec.sync).bound if spec.sync != "bsp" else None
        self.size_bytes = 4 * models.n_params(spec.model)   # one parameter message
        self.cond = threading.Condition()
        self.asked: dict[int, set[int]] = {}     # round -> ranks that asked (BSP)
        self.plans: dict[int, dict[int, dict]] = {}
        self.progress = [-1] * self.n            # the round each peer last asked for (SSP)
        self.controller = threading.Lock()       # one controller conversation at a time
        self.error: str | None = None
        self.server: socket.socket | None = None
        self.threads: list[threading.Thread] = []

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Coordinator:
        self.mcast.reset()   # the last run's plan and waiting counts are not this run's
        with contextlib.suppress(FileNotFoundError):
            self.sock_path.unlink()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(self.sock_path))
        self.server.listen(self.n + 4)
        t = threading.Thread(target=self._accept, name="coord-accept", daemon=True)
        t.start()
        self.threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        with self.cond:
            self.error = self.error or "the run ended"
            self.cond.notify_all()
        if self.server is not None:
            with contextlib.suppress(OSError):
                self.server.shutdown(socket.SHUT_RDWR)
            self.server.close()
        with contextlib.suppress(FileNotFoundError):
            self.sock_path.unlink()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                try:
                    req = json.loads(line)
                    if req.get("op") != "sync":
                        raise ValueError(f"unknown request {req.get('op')!r}")
                    reply = self.sync(int(req["rank"]), int(req["round"]))
                except Exception as exc:  # the peer gets the sentence and fails with it
                    reply = {"error": str(exc)}
                f.write((json.dumps(reply) + "\n").encode())
                f.flush()

    # ---- rounds ------------------------------------------------------------------------------

    def sync(self, rank: int, round_: int) -> dict:
        """Block until ``rank`` may start ``round_``; return its part of the round's plan."""
        if not 0 <= rank < self.n:
            raise ValueError(f"rank {rank} is not a peer of this run")
        final = round_ >= self.spec.rounds
        if self.bound is None or final:
            return self._barrier(rank, round_, final)
        with self.cond:
            self.progress[rank] = round_
            self.cond.notify_all()
            self._wait(lambda: min(self.progress) >= round_ - self.bound)
        with self.controller:
            return self._plan(round_, [rank])[rank]

    def _wait(self, ready) -> None:
        deadline = time.monotonic() + self.spec.timeout_s
        while not ready():
            if self.error:
                raise RuntimeError(self.error)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the round barrier timed out")
            self.cond.wait(min(left, 1.0))

    def _barrier(self, rank: int, round_: int, final: bool) -> dict:
        with self.cond:
            asked = self.asked.setdefault(round_, set())
            asked.add(rank)
            if final:
                self.progress[rank] = round_
            if len(asked) == self.n:
                self.cond.notify_all()
                planner = True
            else:
                planner = False
                self._wait(lambda: round_ in self.plans)
        if planner:
            if final:
                plan = {r: {"round": round_, "stop": True} for r in range(self.n)}
            else:
                with self.controller:
                    turn = round_ % self.n
                    plan = self._plan(round_, list(range(turn, self.n)) + list(range(turn)))
            with self.cond:
                self.plans[round_] = plan
                self.plans.pop(round_ - 2, None)
                self.asked.pop(round_ - 2, None)
                self.cond.notify_all()
        return self.plans[round_][rank]

    def _plan(self, round_: int, senders: list[int]) -> dict[int, dict]:
        """Ask the controller for ``senders``' receivers this round; their sync answers."""
        spec = self.spec
        t0 = time.monotonic()
        reply = self.mcast.round(round_, [self.names[s] for s in senders], spec.p, spec.policy,
                                 seed=spec.seed, size_bytes=self.size_bytes,
                                 install=spec.copy == "switch")
        answers, log = {}, []
        for s, sel in zip(senders, reply["selections"]):
            receivers = sorted(self.names.index(name) for name in sel["receivers"])
            rate = sel["pace_mbps"]
            answers[s] = {"round": round_, "stop": False, "receivers": receivers,
                          "group": group_address(self.ips[s]) if spec.copy == "switch" else None,
                          "rate_mbps": max(rate, RATE_FLOOR_MBPS)}
            log.append({"sender": s, "receivers": receivers, "rate_mbps": answers[s]["rate_mbps"],
                        "estimate_s": sel["estimate_s"],
                        "random_p_estimate_s": sel["random_p_estimate_s"],
                        "forced": len(sel["forced"])})
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"round": round_, "t_mono": time.monotonic(),
                                "plan_s": time.monotonic() - t0,
                                "select_s": reply["select_s"], "install_s": reply["install_s"],
                                "settle_s": reply["settle_s"], "senders": log}) + "\n")
        if spec.copy == "switch":
            self._log_groups(round_)
        return answers

    def _log_groups(self, round_: int) -> None:
        """One line of ``groups.jsonl``: every installed group's structure after this round's
        plan (read without waiting for the datapath's counters, which are not kept)."""
        groups = [{"switch": g["switch"], "sender": g["sender"], "group": g["group"],
                   "group_id": g["group_id"],
                   "buckets": [{"port": b["port"], "toward": b["toward"]} for b in g["buckets"]]}
                  for g in self.mcast.command("groups")["groups"]]
        with open(self.log_path.with_name("groups.jsonl"), "a") as f:
            f.write(json.dumps({"round": round_, "groups": groups}) + "\n")


class CoordinatorClient:
    """A peer's side: one connection, one request per round."""

    def __init__(self, sock_path: Path, timeout_s: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(str(sock_path))
        self.f = self.sock.makefile("rwb")

    def sync(self, rank: int, round_: int) -> dict:
        """Ask to start ``round_`` (see the module docstring)."""
        self.f.write((json.dumps({"op": "sync", "rank": rank, "round": round_}) + "\n").encode())
        self.f.flush()
        line = self.f.readline()
        if not line:
            raise ConnectionError("the round coordinator closed the connection.")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the round coordinator refused round {round_}: {reply['error']}.")
        return reply

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self.f.close()
            self.sock.close()


def socket_path(tag: str) -> Path:
    """A short path for the coordinator's socket (Unix socket paths are limited to 107 bytes,
    run folders can be deeper): ``/run/ltp-testbed/p2p-<pid>-<tag>.sock``."""
    folder = Path("/run/ltp-testbed")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"p2p-{os.getpid()}-{tag}.sock"

