"""The PS loop (harness.hosts.ps) against a fake transport end and a fake clock: what each sync mode
applies and with what staleness, and how membership reacts to a dead, a silent and a returning
worker. The emulation tests (tests/emulation/test_faults.py) do the same with real parts."""

import numpy as np
import pytest
import torch

from harness.hosts import ps
from harness.hosts.sync import Sync, SyncError, parse_sync
from transports.base import Delivery, Layout, SendReport

N_FLOATS = 4
LAYOUT = Layout.single(N_FLOATS)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeEnd:
    """Workers as scripts: worker r answers message k after ``delay[r]`` seconds with a gradient
    of all ``r + 1``; ``dead`` ranks never answer (``gone`` too if ``tcp``); ``silent_until[r]``
    delays everything from r until then. ``stream`` models a TCP stream: a send given up at its
    deadline still reaches the worker once it is reachable (the bytes were in the kernel), a
    copy of parameters the worker already has is ignored by it, and a gradient older than what
    the PS asks for is dropped (``transports.tcp._Inbox.take``)."""

    def __init__(self, clock, n, delay=None, dead=(), tcp=False, silent_until=None,
                 restart_at=None, stream=False):
        self.stream, self.seen = stream, {}   # rank -> the last parameters it got
        self.clock, self.n = clock, n
        self.restart_at = restart_at or {}   # rank -> when a fresh process sends its join
        self.delay = delay or [0.1] * n
        self.dead, self.tcp = set(dead), tcp
        self.silent_until = silent_until or {}
        self.inflight = {}   # rank -> (msg, ready at)
        self.sent_log = []

    def _reachable(self, r):
        return r not in self.dead and self.clock.now >= self.silent_until.get(r, -1)

    def send_some(self, messages, values, timeout_s):
        self.sent_log.append(dict(messages))
        out = {}
        for r, k in messages.items():
            if self.stream and self.seen.get(r) == k and self._reachable(r):   # it has it
                out[r] = SendReport(16, 40)
            elif self._reachable(r):
                self.inflight[r] = (k, self.clock.now + self.delay[r])
                self.seen[r] = k
                out[r] = SendReport(16, 40)
            elif self.stream and r not in self.dead:   # arrives when the link is back
                self.inflight[r] = (k, self.silent_until[r] + self.delay[r])
                self.seen[r] = k
        if any(r not in out and not (self.tcp and r in self.dead) for r in messages):
            self.clock.now += timeout_s   # a send to an unreachable worker runs to the deadline
        return out

    def recv_some(self, wanted, min_count, timeout_s):
        deadline = self.clock.now + timeout_s
        for r, at in list(self.restart_at.items()):
            ids = wanted.get(r, ())
            if isinstance(ids, tuple) and (1 << ps.GEN_SHIFT) in ids and at <= deadline:
                del self.restart_at[r]
                self.dead.discard(r)
                self.clock.now = max(self.clock.now, at)
                d = Delivery.whole(np.zeros(N_FLOATS, np.float32), LAYOUT,
                                   msg_id=float(1 << ps.GEN_SHIFT))
                return {r: d}
        if self.stream:
            for r, (k, at) in list(self.inflight.items()):
                ids = wanted.get(r, ())
                ids = ids if isinstance(ids, tuple) else (ids,)
                if ids and k < min(ids) and max(at, self.silent_until.get(r, 0)) <= deadline:
                    del self.inflight[r]   # arrived while older than anything asked for
        ready = sorted((at, r) for r, (k, at) in self.inflight.items()
                       if r in wanted and k in (wanted[r] if isinstance(wanted[r], tuple)
                                                else (wanted[r],)) and r not in self.dead
                       and max(at, self.silent_until.get(r, 0)) <= deadline)
        ready = [(max(at, self.silent_until.get(r, 0)), r) for at, r in ready]
        ready.sort()
        if len(ready) >= min_count and min_count > 0:
            self.clock.now = max(self.clock.now, ready[min_count - 1][0])
        else:
            self.clock.now = deadline
        got = {}
        for at, r in ready:
            if at <= self.clock.now:
                k = self.inflight.pop(r)[0]
                got[r] = Delivery.whole(np.full(N_FLOATS, r + 1, np.float32), LAYOUT,
                                        msg_id=float(k))
        return got

    def gone(self):
        return set(self.dead) if self.tcp else set()

    def observe(self, msg_id, deliveries):
        pass

    def average(self, deliveries):
        return np.mean([d.values for d in deliveries], axis=0, dtype=np.float32)


class FakeTrainer:
    def __init__(self, rounds, timeout_s=60.0):
        self.params = torch.zeros(N_FLOATS)
        self.train_s = 0.0
        self.rounds = rounds
        self.spec = type("S", (), {"timeout_s": timeout_s})

    def after(self, done):
        return "iterations" if done >= self.rounds else ""


class FakeRecorder:
    def __init__(self):
        self.iterations, self.members, self.ended = [], [], False

    def iteration(self, rec):
        self.iterations.append(rec)

    def member(self, ev):
        self.members.append(ev)

    def end(self):
        self.ended = True


def _run(sync, n=3, rounds=6, detect=True, **end_args):
    clock = Clock()
    end = FakeEnd(clock, n, **end_args)
    rec, trainer = FakeRecorder(), FakeTrainer(rounds)
    server = ps.ParameterServer(end, trainer, rec, n, parse_sync(sync), lr=1.0, started=0.0,
                                clock=clock, detect=detect)
    t, why = server.run()
    server.finish(t)
    return t, why, rec, trainer, end


def test_sync_texts():
    assert parse_sync("BSP") == Sync("bsp") and parse_sync("ssp:3") == Sync("ssp", 3)
    assert parse_sync("async").text() == "async" and Sync("ssp", 0).text() == "ssp:0"
    for bad in ("ssp", "ssp:-1", "ssp:x", "hogwild"):
        with pytest.raises(SyncError, match="not a synchronisation mode"):
            parse_sync(bad)


def test_bsp_averages_every_worker_with_no_staleness():
    t, why, rec, trainer, _ = _run("bsp")
    assert (t, why) == (6, "iterations") and rec.ended
    assert all(r.ranks == [0, 1, 2] and r.staleness == [0, 0, 0] for r in rec.iterations)
    # Six steps of lr 1 down the mean gradient (1 + 2 + 3) / 3 = 2.
    assert torch.allclose(trainer.params, torch.full((N_FLOATS,), -12.0))


def test_async_applies_each_gradient_with_its_staleness():
    t, _, rec, trainer, _ = _run("async", delay=[0.1, 0.1, 0.35])
    assert t == 6
    assert all(len(r.ranks) == 3 for r in rec.iterations)
    stale = [s for r in rec.iterations for s in r.staleness]
    assert max(stale) >= 2 and min(stale) == 0
    # The fast workers contributed more than the slow one.
    ranks = [x for r in rec.iterations for x in r.ranks]
    assert ranks.count(0) > ranks.count(2)


def test_ssp_holds_a_fast_worker_to_its_bound():
    _, _, rec, _, end = _run("ssp:0", delay=[0.1, 0.1, 0.35])
    ranks = [x for r in rec.iterations for x in r.ranks]
    # With bound 0 nobody gets ahead of the slowest: every worker contributes equally.
    assert ranks.count(0) == ranks.count(2) == ranks.count(1)


@pytest.mark.parametrize("tcp", [False, True])
def test_a_dead_worker_is_dropped_within_the_deadline(tcp):
    clock_end = {"dead": (2,), "tcp": tcp}
    t, why, rec, _, _ = _run("bsp", **clock_end)
    assert why == "iterations"
    lost = rec.members[0]
    assert lost.rank == 2 and lost.event == ("gone" if tcp else "missing")
    assert lost.t_s <= ps.MISS_FLOOR_S + 0.2
    assert all(r.ranks == [0, 1] for r in rec.iterations)


def test_a_silent_worker_comes_back():
    # Worker 2 unreachable from 0.5 s to 3 s (a cut link): missing, then back.
    t, why, rec, _, _ = _run("bsp", rounds=20, silent_until={2: 3.0},
                             delay=[0.1, 0.1, 0.1])
    events = [(e.event, e.rank) for e in rec.members]
    assert events[0] == ("missing", 2) and ("back", 2) in events
    assert rec.iterations[-1].ranks == [0, 1, 2]
    assert any(r.ranks == [0, 1] for r in rec.iterations)


def test_a_cut_tcp_worker_whose_parameters_got_through_comes_back():
    # The PS gave up sending to worker 2 while its link was cut, but TCP delivered the bytes once
    # the link was back and the worker answered before the PS's retry finished: its gradient is
    # taken (not dropped as unasked-for), and it trains with the others again.
    t, why, rec, _, _ = _run("bsp", rounds=30, silent_until={2: 3.0}, stream=True)
    events = [(e.event, e.rank) for e in rec.members]
    assert events[0] == ("missing", 2) and ("back", 2) in events
    assert rec.iterations[-1].ranks == [0, 1, 2]


def test_under_ssp_a_returning_worker_rejoins_at_the_others_pace():
    t, why, rec, _, _ = _run("ssp:1", rounds=30, silent_until={2: 3.0})
    assert why == "iterations" and ("back", 2) in [(e.event, e.rank) for e in rec.members]
    after = [r for r in rec.iterations if r.t_s > 3.5]
    # Once back, it contributes no more than its share: the others were not held for it.
    ranks = [x for r in after for x in r.ranks]
    assert ranks and ranks.count(2) <= ranks.count(0) + 2


@pytest.mark.parametrize("tcp", [False, True])
def test_a_restarted_worker_joins_with_its_new_ids_and_trains_again(tcp):
    t, why, rec, _, end = _run("bsp", rounds=40, dead=(2,), tcp=tcp, restart_at={2: 2.5})
    assert why == "iterations"
    events = [(e.event, e.rank) for e in rec.members]
    assert events[0] == ("gone" if tcp else "missing", 2) and ("back", 2) in events
    assert rec.iterations[-1].ranks == [0, 1, 2]
    # Its parameters went out under the new generation's ids.
    assert any(m.get(2, 0) >= (1 << ps.GEN_SHIFT) + 1 for m in end.sent_log)


def test_bsp_steps_along_the_aggregators_vector_and_records_its_verdicts():
    """With a ``combine`` (harness.hosts.robust.make_combine) a bsp round steps along the rule's
    vector, and the round's record carries what the rule kept, why and how long it took."""
    from harness.training import aggregators

    calls = []

    def combine(deliveries):
        calls.append(len(deliveries))
        return aggregators.median(np.stack([d.values for d in deliveries])), 1

    clock = Clock()
    end = FakeEnd(clock, 3)
    rec, trainer = FakeRecorder(), FakeTrainer(4)
    server = ps.ParameterServer(end, trainer, rec, 3, parse_sync("bsp"), lr=1.0, started=0.0,
                                clock=clock, combine=combine)
    t, _ = server.run()
    assert t == 4 and calls == [3] * 4
    # The median of 1, 2, 3 is 2: four steps of lr 1.
    assert torch.allclose(trainer.params, torch.full((N_FLOATS,), -8.0))
    for r in rec.iterations:
        assert r.ranks == [0, 1, 2] and r.agg_kept == [False, True, False] and r.agg_f == 1
        assert r.agg_used_frac == [0.0, 1.0, 0.0] and len(r.agg_reasons) == 3
    # Without one, the PS averages and every update is kept.
    _, _, plain, _, _ = _run("bsp", rounds=2)
    assert all(r.agg_kept == [True] * 3 and r.agg_f == 0 for r in plain.iterations)


@pytest.mark.parametrize("sync", ["bsp", "ssp:1"])
def test_without_a_fault_every_gradient_is_waited_for(sync):
    # A run that injects no fault does not detect: a worker 3 s slow (three times the 1 s floor)
    # is waited for in every round, never missing; with detection it would be dropped.
    t, why, rec, _, _ = _run(sync, rounds=5, delay=[0.1, 0.1, 3.0], detect=False)
    assert why == "iterations" and rec.members == []
    if sync == "bsp":
        assert all(r.ranks == [0, 1, 2] for r in rec.iterations)
        assert all(r.iter_s >= 3.0 for r in rec.iterations)
    t, why, rec, _, _ = _run(sync, rounds=5, delay=[0.1, 0.1, 3.0])
    assert ("missing", 2) in [(e.event, e.rank) for e in rec.members]
