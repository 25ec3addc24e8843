"""Zeno++ with the real host processes over loopback TCP (no emulation, no root): under async,
validating on the PS's own held-out samples, every arrival's verdict reaches the PS's records."""

from harness.running.spec import RunSpec
from tests.conformance.test_training_loopback import _train


def test_zenopp_judges_every_async_arrival_from_the_ps_own_samples(tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=4, iterations=12, eval_every=12, port=17800,
                   timeout_s=120, sync="async", byzantine="1:sign-flip", aggregator="zeno++",
                   holdout=2000)
    files = _train(tmp_path, spec)
    rounds = files.ps_iterations()
    assert len(rounds) == 12
    verdicts = [(r, k) for rec in rounds for r, k in zip(rec.ranks, rec.agg_kept)]
    assert len(verdicts) == 4 * 12 and all(len(rec.agg_scores) == len(rec.ranks)
                                           for rec in rounds)
    attacker = [k for r, k in verdicts if r == 3]
    honest = [k for r, k in verdicts if r != 3]
    assert attacker and sum(attacker) <= 0.25 * len(attacker)
    assert honest and sum(honest) >= 0.75 * len(honest)
    assert all(s is not None for rec in rounds for s in rec.agg_scores)
