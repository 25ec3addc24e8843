"""Byzantine attacks and the PS's aggregation rules, exactly (numpy only, no network)."""

import numpy as np
import pytest

from harness.running.spec import RunSpec, SpecError
from harness.training import aggregators as agg
from harness.training.aggregators import AggregatorError
from harness.training.byzantine import Attack, alie_z, corrupt


def _honest(n=6, d=50, seed=0):
    """``n`` honest updates scattered around one true gradient."""
    rng = np.random.default_rng(seed)
    true = rng.normal(0, 1, d)
    return true, (true + 0.1 * rng.normal(0, 1, (n, d))).astype(np.float32)


# ---- attacks -------------------------------------------------------------------------------
def test_the_attackers_are_the_highest_ranks():
    assert Attack(2, "sign-flip").ranks(8) == [6, 7]
    assert Attack().ranks(8) == []


def test_each_behaviour_on_a_known_gradient():
    g = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    rng = np.random.default_rng(0)
    assert np.allclose(corrupt(Attack(1, "sign-flip"), g, 8, rng), -4 * g)
    assert np.allclose(corrupt(Attack(1, "sign-flip", 1.0), g, 8, rng), -g)
    assert np.allclose(corrupt(Attack(1, "scaled"), g, 8, rng), 10 * g)
    big = np.zeros(100_000, dtype=np.float32)
    noise = corrupt(Attack(1, "gaussian", 2.0), big, 8, rng)
    assert abs(noise.std() - 2.0) < 0.02 and abs(noise.mean()) < 0.02
    rand = corrupt(Attack(1, "random"), big + 5, 8, rng)
    assert abs(rand.mean()) < 0.02 and abs(rand.std() - 1.0) < 0.02   # g is ignored
    honest = np.array([[1.0, 2.0], [3.0, 2.0]])
    alie = corrupt(Attack(2, "alie", 1.5), g[:2], 8, rng, lambda: honest)
    assert np.allclose(alie, [2.0 - 1.5 * 1.0, 2.0])   # mu - z sigma
    ipm = corrupt(Attack(2, "ipm"), g[:2], 8, rng, lambda: honest)
    assert np.allclose(ipm, [-1.0, -1.0])   # -0.5 mu


def test_alie_default_z_is_baruchs():
    # n = 50, b = 12 (their example): s = 14, z = Phi^-1(36/50) ~ 0.58
    assert alie_z(50, 12) == pytest.approx(0.5828, abs=1e-3)
    assert Attack(2, "alie").value(8) == pytest.approx(alie_z(8, 2))


# ---- aggregation rules ---------------------------------------------------------------------
def test_mean_keeps_everything():
    _, u = _honest()
    out = agg.mean(u)
    assert np.allclose(out.vector, u.mean(axis=0), atol=1e-6) and all(out.kept)


def test_median_and_trimmed_mean_resist_b_outliers():
    true, u = _honest(6)
    bad = np.vstack([u, -100 * u[:2]])   # two sign-flipped, scaled outliers
    for out in (agg.median(bad), agg.trimmed_mean(bad, 2)):
        # no further from the truth than a single honest update is
        assert np.linalg.norm(out.vector - true) < np.linalg.norm(u[0] - true)
        assert out.kept == [True] * 6 + [False] * 2
        assert out.used_frac[6] < 0.2 and out.used_frac[7] < 0.2
    assert np.linalg.norm(agg.mean(bad).vector - true) > 10


def test_median_is_the_coordinate_median():
    u = np.array([[1.0, 5.0], [2.0, 4.0], [9.0, 0.0]], dtype=np.float32)
    assert np.allclose(agg.median(u).vector, [2.0, 4.0])
    u4 = np.vstack([u, [[3.0, 1.0]]]).astype(np.float32)
    assert np.allclose(agg.median(u4).vector, [2.5, 2.5])
    assert np.allclose(agg.trimmed_mean(u4, 1).vector, [2.5, 2.5])


def test_krum_picks_from_the_honest_cluster():
    true, u = _honest(6)
    rng = np.random.default_rng(3)
    bad = np.vstack([u, rng.normal(0, 5, (2, u.shape[1]))]).astype(np.float32)
    out = agg.krum(bad, 2)
    chosen = out.kept.index(True)
    assert chosen < 6 and sum(out.kept) == 1
    assert np.allclose(out.vector, bad[chosen])
    # A colluding pair (identical vectors) far away does not win either.
    pair = np.vstack([u, np.tile(-10 * true, (2, 1))]).astype(np.float32)
    assert agg.krum(pair, 2).kept.index(True) < 6


def test_score_rejects_a_sign_flipped_update():
    # Loss: 0.5 |x - x*|^2 at x = 0; an honest update points along the gradient x - x* = -x*.
    target = np.array([1.0, -1.0, 2.0])
    x = np.zeros(3)
    lr = 0.1

    def loss(u):
        y = x if u is None else x - lr * u
        return 0.5 * float(((y - target) ** 2).sum())

    honest = np.array([-target, -0.9 * target, -1.1 * target])
    updates = np.vstack([honest, 4 * target]).astype(np.float32)   # the last: sign-flip x4
    out = agg.score(updates, 1, loss, lr)
    assert out.kept == [True, True, True, False]
    assert out.scores[3] < 0 < min(out.scores[:3])
    assert "not among the 3 best" in out.reasons[3]
    assert np.allclose(out.vector, honest.mean(axis=0), atol=1e-6)
    # A threshold above every score keeps nothing: no step.
    none = agg.score(updates, 1, loss, lr, threshold=100.0)
    assert not any(none.kept) and not none.vector.any()
    assert "below the threshold" in none.reasons[0]
    # The penalty counts against size.
    heavy = agg.score(updates, 0, loss, lr, penalty=10.0)
    assert all(s < 0 for s in heavy.scores)


@pytest.mark.parametrize("name,n,f,words", [
    ("krum", 6, 2, r"n > 2f \+ 2"), ("trimmed-mean", 4, 2, r"n > 2f"),
    ("score", 2, 2, "keeps n - f"), ("avg", 8, 0, "unknown aggregator")])
def test_rules_refuse_what_they_cannot_tolerate(name, n, f, words):
    with pytest.raises(AggregatorError, match=words):
        agg.check_aggregator(name, n, f)


@pytest.mark.parametrize("fields,words", [
    ({"byzantine": "9:sign-flip"}, "needs at least 10 workers"),
    ({"byzantine": "2:sign-flip", "aggregator": "krum", "n_workers": 6}, r"n > 2f \+ 2"),
    ({"aggregator": "score", "sync": "async"}, "only bsp has"),
    ({"byzantine": "1:nope"}, "unknown Byzantine behaviour"),
    ({"score_batch": 0}, "score_batch")])
def test_specs_refuse_impossible_attacks_and_rules(fields, words):
    with pytest.raises(SpecError, match=words):
        RunSpec(**fields)


def test_default_runs_keep_their_ids_and_tolerate_defaults_to_the_attackers():
    assert "byz" not in RunSpec().run_id and "byzantine" not in RunSpec().to_json()
    spec = RunSpec(byzantine="2:sign-flip", aggregator="score")
    assert spec.tolerated == 2 and "_byz2sign-flip_score_" in spec.run_id
    assert RunSpec(byzantine="2:sign-flip", tolerate=1).tolerated == 1
