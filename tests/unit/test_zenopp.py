"""Zeno++ and the PS's held-out validation set, exactly (no network): the test's arithmetic on
small vectors, the validation gradient computed once per parameter version, the PS applying
only what the judge accepts in every sync mode, and the training set split between the workers
and the PS."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.hosts import ps
from harness.hosts.robust import Judge, Validation
from harness.hosts.sync import parse_sync
from harness.running.spec import RunSpec
from harness.training import aggregators as agg
from harness.training import datasets, models
from tests.unit.test_ps import N_FLOATS, Clock, FakeEnd, FakeRecorder, FakeTrainer
from transports.base import Delivery

V = np.array([1.0, -2.0, 0.5, 3.0])
LR = 0.1


def _score(u, v=V, lr=LR, rho=agg.SCORE_PENALTY):
    u = u * np.linalg.norm(v) / np.linalg.norm(u)   # rescaled to |v| first, as the paper does
    return lr * float(u @ v) - rho * lr * lr * float(u @ u)


# ---- the test itself -----------------------------------------------------------------------
def test_the_validation_gradient_is_accepted_and_its_sign_flip_rejected():
    updates = np.vstack([V, -4 * V, 0.5 * V]).astype(np.float32)
    out = agg.zenopp(updates, V, LR)
    assert out.kept == [True, False, True]
    assert out.scores == pytest.approx([_score(u) for u in updates.astype(np.float64)])
    assert out.scores[1] < 0 < out.scores[0]
    assert "below 0" in out.reasons[1] and "at least 0" in out.reasons[0]
    # The accepted ones, each rescaled to |v|, averaged; used_frac holds their scales.
    assert np.allclose(out.vector, V)
    assert out.used_frac == pytest.approx([1.0, 0.0, 2.0])
    assert agg.aggregate(agg.ZENOPP, updates, 0, lr=LR, v=V).kept == out.kept


def test_rescaling_takes_the_size_out_of_an_update_and_the_penalty_what_is_left():
    huge = (1e5 * V).astype(np.float32)[None, :]
    out = agg.zenopp(huge, V, LR)
    assert out.kept == [True] and np.allclose(out.vector, V, rtol=1e-5)   # applied at |v|
    # With every update at |v|, the penalty decides only when lr rho |v|^2 outweighs the gain:
    # lr |v|^2 (1 - rho lr) < 0 once rho > 1 / lr.
    assert agg.zenopp(huge, V, LR, penalty=2 / LR).kept == [False]
    zero = np.zeros((1, 4), dtype=np.float32)
    assert agg.zenopp(zero, V, LR).kept == [False]   # no direction to test


def test_the_threshold_admits_a_slightly_harmful_update_and_none_accepted_is_no_step():
    slight = np.array([[0.0, 0.01, 0.0, 0.0]], dtype=np.float32)   # along -v's second axis
    harm = -_score(slight[0].astype(np.float64))
    assert harm > 0 and agg.zenopp(slight, V, LR).kept == [False]
    assert agg.zenopp(slight, V, LR, threshold=1.01 * harm).kept == [True]
    assert agg.zenopp(V[None, :].astype(np.float32), V, LR, threshold=-10.0).kept == [False]
    bad = np.vstack([-V, np.full(4, np.nan)]).astype(np.float32)
    out = agg.zenopp(bad, V, LR)
    assert out.kept == [False, False] and out.scores[1] == -np.inf
    assert not out.vector.any()


# ---- the validation gradient, per version ------------------------------------------------
N_TRAIN = 400


@pytest.fixture
def tiny_data(monkeypatch):
    """A fake training set: image ``i`` is filled with ``i / N_TRAIN`` (so a batch tells which
    samples it holds), label ``i % 10``."""
    x = (torch.arange(N_TRAIN, dtype=torch.float32) / N_TRAIN)[:, None].repeat(1, 784)
    y = torch.arange(N_TRAIN) % 10
    monkeypatch.setattr(datasets, "load", lambda name, split: (x, y))
    return x, y


class AvgEnd:
    def average(self, deliveries):
        return np.mean([d.values for d in deliveries], axis=0, dtype=np.float32)


def _judge(spec):
    model = models.build(spec.model, spec.seed)
    params = models.flat_params(model).clone()
    return Judge(spec, model, params, AvgEnd()), model, params


def test_the_validation_gradient_is_computed_once_per_version_at_the_live_parameters(tiny_data):
    x, y = tiny_data
    spec = RunSpec(aggregator=agg.ZENOPP, score_batch=16)
    judge, model, params = _judge(spec)
    v0 = judge.validation.gradient(0)
    assert judge.validation.gradient(0) is v0 and judge.validation.computed == 1
    # What it is: the gradient of the loss on the first batch the seeded generator draws.
    idx = np.random.default_rng([spec.seed, 0x5C0E]).choice(N_TRAIN, 16, replace=False)
    check = models.build(spec.model, spec.seed)
    F.cross_entropy(check(x[idx]), y[idx]).backward()
    assert np.allclose(v0, models.flat_grads(check).numpy(), atol=1e-6)
    layout = models.layout(model)
    rows = [Delivery.whole(v0.copy(), layout), Delivery.whole(-4 * v0, layout)]
    out = judge(rows, 0)
    assert out.kept == [True, False] and np.allclose(out.vector, v0)
    assert judge.validation.computed == 1   # still version 0
    params.add_(torch.from_numpy(out.vector), alpha=-spec.lr)
    v1 = judge.validation.gradient(1)
    assert judge.validation.computed == 2 and not np.allclose(v1, v0)


# ---- the PS applies what the judge accepts -------------------------------------------------
def _rank_judge(reject):
    """A judge over the fake workers' all-(r + 1) gradients that rejects worker ``reject`` (its
    update is tested turned around), with zeno++'s own arithmetic: v = (1, 1, 1, -1), lr 1,
    rho 0.2; every update rescales to all-ones (|v| = 2), which scores 2 - 0.8, turned around
    -2 - 0.8."""
    v, calls = np.array([1.0, 1.0, 1.0, -1.0]), []

    def judge(deliveries, version):
        calls.append((len(deliveries), version))
        rows = [d.values * (-1 if d.values[0] == reject + 1 else 1) for d in deliveries]
        return agg.zenopp(np.stack(rows), v, 1.0, penalty=0.2)

    assert agg.zenopp(np.full((1, 4), -(reject + 1.0)), v, 1.0, penalty=0.2).kept == [False]
    assert agg.zenopp(np.full((1, 4), reject + 1.0), v, 1.0, penalty=0.2).kept == [True]
    return judge, calls


def _serve(sync, judge, rounds):
    clock = Clock()
    end = FakeEnd(clock, 3)
    rec, trainer = FakeRecorder(), FakeTrainer(rounds)
    server = ps.ParameterServer(end, trainer, rec, 3, parse_sync(sync), lr=1.0, started=0.0,
                                clock=clock, judge=judge)
    t, why = server.run()
    return t, rec, trainer, server


@pytest.mark.parametrize("sync", ["async", "ssp:1"])
def test_async_applies_only_accepted_arrivals_and_keeps_serving_the_rejected_worker(sync):
    judge, calls = _rank_judge(reject=2)   # worker 2's gradient (all 3s) scores 6 - 7.2
    t, rec, trainer, server = _serve(sync, judge, rounds=6)
    assert t == 6 and all(n == 1 for n, _ in calls)   # each arrival judged alone
    ranks = [r for it in rec.iterations for r in it.ranks]
    kept = [k for it in rec.iterations for k in it.agg_kept]
    assert kept == [r != 2 for r in ranks] and ranks.count(2) >= 5   # still served every time
    assert all(len(it.agg_reasons) == len(it.ranks) for it in rec.iterations)
    # Only the accepted arrivals stepped (lr / N each) and made versions.
    accepted = [r for r in ranks if r != 2]
    assert server.version == len(accepted)
    expected = -len(accepted) / 3   # each accepted update applied at |v|: all ones
    assert torch.allclose(trainer.params, torch.full((N_FLOATS,), float(expected)))
    # Each judgement saw the version the parameters were at: rejections leave it.
    assert [v for _, v in calls] == [sum(1 for r in ranks[:i] if r != 2) for i in range(len(ranks))]


def test_bsp_averages_the_accepted_updates_and_takes_no_step_when_none_is():
    judge, calls = _rank_judge(reject=2)
    t, rec, trainer, server = _serve("bsp", judge, rounds=4)
    assert calls == [(3, v) for v in range(4)]
    assert all(it.agg_kept == [True, True, False] for it in rec.iterations)
    assert torch.allclose(trainer.params, torch.full((N_FLOATS,), -4.0))   # all ones, rescaled

    def none(deliveries, version):
        return agg.zenopp(np.stack([d.values for d in deliveries]), -np.ones(N_FLOATS), 1.0)

    t, rec, trainer, server = _serve("bsp", none, rounds=3)
    assert t == 3 and server.version == 0 and not trainer.params.any()


# ---- the PS's own validation set -----------------------------------------------------------
def test_holdout_and_shards_partition_the_training_set():
    n, workers, seed = 60_000, 8, 3
    pool, held = datasets.split(n, seed, 6000)
    assert len(held) == 6000 and len(pool) == n - 6000
    shards = [datasets.shard(n, r, workers, seed, 6000) for r in range(workers)]
    every = np.concatenate(shards + [held])
    assert len(every) == n and len(np.unique(every)) == n   # disjoint, and all of it
    assert not np.intersect1d(np.concatenate(shards), held).size
    for r in range(workers):   # each shard: a prefix of the shard it has without a holdout
        whole = datasets.shard(n, r, workers, seed)
        assert np.array_equal(whole[:len(shards[r])], shards[r])
    with pytest.raises(datasets.DatasetError, match="does not fit"):
        datasets.split(100, 0, 100)


def test_holdout_0_is_todays_sharding():
    perm = np.random.default_rng(5).permutation(60_000)   # the formula before holdouts
    for r in range(8):
        assert np.array_equal(datasets.shard(60_000, r, 8, 5), perm[r::8])
        assert np.array_equal(datasets.shard(60_000, r, 8, 5, 0), perm[r::8])


def test_the_validator_draws_from_the_holdout_only_and_as_before_without_one(tiny_data):
    x, _ = tiny_data
    spec = RunSpec(aggregator="score", score_batch=16, seed=2)
    old = np.random.default_rng([spec.seed, 0x5C0E])   # robust.make_combine before holdouts
    val = Validation(spec, models.build("mlp", 0), torch.zeros(1))
    for _ in range(3):
        xb, _ = val.batch()
        assert np.array_equal(xb[:, 0].numpy(), x[old.choice(N_TRAIN, 16, replace=False), 0])
    held = set(datasets.split(N_TRAIN, 2, 100)[1].tolist())
    val = Validation(spec.replace(holdout=100), models.build("mlp", 0), torch.zeros(1))
    seen = set()
    for _ in range(20):
        xb, _ = val.batch()
        seen |= set(np.rint(xb[:, 0].numpy() * N_TRAIN).astype(int).tolist())
    assert seen <= held and len(seen) > 50

