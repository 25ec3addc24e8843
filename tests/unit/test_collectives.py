"""The collectives' schedules without a network: ring all-reduce through an in-memory ring, and
the tree directory forming, growing and re-forming around a failed node."""

import numpy as np
import pytest

from harness.hosts import ring
from harness.hosts.directory import ROOT, Directory, TreeError


def _all_reduce(grads, pieces=1, lose=None):
    """Drive one RingNode per gradient through the ring; ``lose(step, rank)`` -> mask or None."""
    n = len(grads)
    nodes = [ring.RingNode(r, n, g, pieces) for r, g in enumerate(grads)]
    for step in range(2 * (n - 1)):
        out = [node.outgoing(step) for node in nodes]   # everyone sends before anyone adds
        for r, node in enumerate(nodes):
            for piece, values in enumerate(out[(r - 1) % n]):
                mask = lose(step, r, len(values)) if lose else None
                node.incoming(step, piece, values, mask)
    return nodes


@pytest.mark.parametrize("n, n_floats, pieces", [(2, 5, 1), (3, 10, 1), (8, 1001, 4), (5, 7, 3)])
def test_every_worker_ends_with_the_mean(n, n_floats, pieces):
    rng = np.random.default_rng(n)
    grads = [rng.normal(size=n_floats).astype(np.float32) for _ in range(n)]
    for node in _all_reduce(grads, pieces):
        np.testing.assert_allclose(node.mean(), np.mean(grads, axis=0), rtol=1e-5, atol=1e-6)


def test_each_worker_sends_two_n_minus_one_shares():
    n, n_floats = 8, 800
    node = ring.RingNode(0, n, np.zeros(n_floats, np.float32))
    sent = sum(sum(len(m) for m in node.outgoing(s)) for s in range(2 * (n - 1)))
    assert sent == 2 * (n - 1) * n_floats // n


def test_message_ids_are_distinct_on_a_link():
    n, pieces = 4, 3
    ids = {ring.message_id(t, s, p, n, pieces)
           for t in range(5) for s in range(2 * (n - 1)) for p in range(pieces)}
    assert len(ids) == 5 * 2 * (n - 1) * pieces


def test_a_lost_gather_coordinate_keeps_the_partial_sum_and_is_counted():
    grads = [np.full(4, float(r + 1), np.float32) for r in range(2)]

    def lose(step, rank, size):   # the gather step's first coordinate never reaches worker 0
        mask = np.ones(size, bool)
        if step == 1 and rank == 0:
            mask[0] = False
        return mask

    nodes = _all_reduce(grads, lose=lose)
    assert nodes[0].lost_floats == 1 and nodes[1].lost_floats == 0
    np.testing.assert_allclose(nodes[1].mean(), 1.5)
    assert nodes[0].mean()[0] == pytest.approx(0.5)   # worker 0's own share of the sum, / N
    np.testing.assert_allclose(nodes[0].mean()[1:], 1.5)


def test_bad_rings_are_refused():
    with pytest.raises(ValueError, match="at least 4 coordinates"):
        ring.shares(3, 4)
    with pytest.raises(ValueError, match="rank must be"):
        ring.schedule(4, 4)


def test_the_tree_grows_from_the_root_in_asking_order():
    d = Directory(fanout=2, root_fanout=1)
    parents = [d.ask(w) for w in (5, 3, 0, 1, 2, 4, 6, 7)]
    assert parents == [ROOT, 5, 5, 3, 3, 0, 0, 1]
    assert d.children(ROOT) == [5] and d.depth() == 4 and d.live() == [5, 3, 0, 1, 2, 4, 6, 7]


def test_a_failed_node_is_routed_around():
    d = Directory(fanout=2, root_fanout=1)
    for w in range(7):
        d.ask(w)                      # 0 under the PS; 1, 2 under 0; 3, 4 under 1; 5, 6 under 2
    new = d.failed(3, parent=1)       # 1 dies: 3 moves to a live holder with room, not below itself
    assert d.nodes[1].dead and new not in (1, 3) and d.parent(3) == new
    assert d.failed(4, parent=1) == d.parent(4) and d.reformed == 2
    assert 1 not in d.live() and sorted(d.live()) == [0, 2, 3, 4, 5, 6]
    assert d.failed(4, parent=1) == d.parent(4) and d.reformed == 2   # reported twice: no change
    # every live worker still reaches the PS
    for w in d.live():
        hops, k = 0, w
        while k != ROOT:
            k, hops = d.parent(k), hops + 1
            assert hops < 10


def test_a_wrongly_blamed_node_comes_back():
    d = Directory(fanout=1, root_fanout=1)
    for w in range(3):
        d.ask(w)                      # a chain: the PS, 0, 1, 2
    d.failed(2, parent=1)             # 0 died, so 1 fell silent and 2 blamed 1
    assert d.nodes[1].dead and d.parent(2) == 0
    d.failed(1, parent=0)             # 1 is alive after all: it reports 0
    assert not d.nodes[1].dead and d.nodes[0].dead and d.parent(1) == ROOT
    with pytest.raises(TreeError, match="PS itself"):
        d.failed(1, parent=ROOT)


def test_a_tree_chunk_is_averaged_over_the_gradients_it_holds():
    from harness.hosts.tree import _Parts, _Sum
    from harness.running.spec import RunSpec

    parts = _Parts.of(RunSpec(n_workers=3, pattern="tree:chunks=2"))
    n = parts.up[-1].offset + parts.up[-1].n_floats
    # workers 0 and 1 in both chunks, worker 2 (given up after its first chunk) in the first only,
    # and half of worker 1's second chunk arrived
    got = _Sum(np.zeros(n, np.float32), np.array([[1, 1, 1], [1, 0.5, 0]], np.float32))
    first, second = parts.up
    first.of(got.total)[:], second.of(got.total)[:] = 6.0, 4.0
    mean = got.mean(parts)
    assert np.all(first.of(mean) == 2.0) and np.all(second.of(mean) == 2.0)
    assert got.ranks() == [0, 1, 2]
    share = first.n_floats / n
    assert got.fractions(parts) == pytest.approx([1.0, share + 0.5 * (1 - share), share])
