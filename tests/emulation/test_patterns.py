"""The collective patterns on the real testbed (docs/collectives.md): a tree and a ring learn what
the PS learns, and the incast is gone from the PS's link.

Four workers through the star at 100 Mbit/s without loss, 10 iterations each. Without loss the
three patterns take the same SGD steps from the same seed, so their final accuracies agree to
rounding; the bytes the switch sent toward the PS per iteration (its port counters) fall from N
gradients (ps) to about one (a tree whose PS serves one worker) and, in a ring, whose gradients
never cross the PS's link, to the one model worker 0 sends for the evaluation at the end (spread
over the run's iterations) and a few control bytes.
"""

import pytest

from harness.training import models
from tests.emulation.conftest import incast_fixture, short_run

ITERATIONS = 10
bed = incast_fixture("patterns", 4)


def _per_iteration(row):
    return row["bottleneck_tx_bytes"] / row["iterations_done"]


@pytest.mark.parametrize("transport", ["ltp", "tcp-cubic"])
def test_tree_and_ring_learn_what_the_ps_learns_and_spare_its_link(bed, tmp_path, transport):
    ps, _, _ = short_run(bed, tmp_path, ITERATIONS, transport=transport)
    tree, _, _ = short_run(bed, tmp_path, ITERATIONS, transport=transport, pattern="tree")
    ring, _, _ = short_run(bed, tmp_path, ITERATIONS, transport=transport, pattern="ring")
    for row in (tree, ring):
        assert row["final_accuracy"] == pytest.approx(ps["final_accuracy"], abs=2e-3)
    gradient = 4 * models.n_params("mlp")
    assert _per_iteration(ps) > 3.5 * gradient           # four gradients into the PS
    assert _per_iteration(tree) < 1.5 * gradient         # one sum into the PS
    # one model for the evaluation, over 10 iterations, and control
    assert _per_iteration(ring) < (1.1 / ITERATIONS + 0.02) * gradient
