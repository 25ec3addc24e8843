"""OptiReduce's end for collectives over loopback (no emulation, no root): a part still arriving
at its deadline is given up with what had arrived, its lost coded floats zero before the inverse
transform; a part of which nothing arrived is all lost, and its late message does not disturb
the next; the deadline follows the part's samples; a ring and a tree over optireduce learn the
same model. (Every mesh scheme's own checks are in test_mesh.py.)"""

import threading
import time

import numpy as np
import pytest

from tests.conformance.loopback import on_free_ports
from tests.conformance.test_patterns_loopback import _train
from harness.running.spec import RunSpec
from topologies.incast import worker_name
from transports import registry
from transports.hadamard import HadamardCode
from transports.mesh import Part

N_FLOATS = 20_000
PARTS = [Part(0, N_FLOATS), Part(0, 1, (1.0, 1.0))]   # one coded part, one whole


def _pair(options, ports):
    """Members 0 (sender) and 1 (receiver) of optireduce with ``options``, joined."""
    transport = registry.create("optireduce", options)
    members = [("127.0.0.1", p) for p in ports]
    ends = []
    try:
        for m in range(2):
            ends.append(transport.mesh(m, members, PARTS))
        joins = [threading.Thread(target=e.join, args=(20.0,)) for e in ends]
        for t in joins:
            t.start()
        for t in joins:
            t.join()
    except BaseException:
        for e in ends:
            e.close()
        raise
    return ends


def _receive_in_thread(end, msg_id, out):
    """Member 1 asks for message ``msg_id`` of part 0 in a thread; returns once it asked."""
    thread = threading.Thread(target=lambda: out.append(end.recv(0, msg_id, 0, 20.0)))
    thread.start()
    limit = time.monotonic() + 10
    while (0, msg_id, 0) not in end.asked and time.monotonic() < limit:
        time.sleep(0.001)
    return thread


@pytest.mark.parametrize("coded", [True, False])
def test_a_slow_part_is_given_up_with_what_arrived(coded):
    # The registry's loss options: 80 KB paced at 20 Mbit/s take about 32 ms, the receiver
    # waits 5 ms (the warm-up's deadline) and drops a tenth of what comes
    options = {**registry.get("optireduce").test_loss_options, "hadamard": coded}
    wait_s = options["timeout_max_ms"] / 1000
    ends = on_free_ports(2, lambda ports: _pair(options, ports))
    try:
        values = np.random.default_rng(1).normal(size=N_FLOATS).astype(np.float32)
        got = []
        thread = _receive_in_thread(ends[1], 1, got)
        ends[0].send([1], 1, 0, values, 20.0)   # returns at the receiver's CLOSE
        thread.join()
        d = got[0]
        assert d.mask is not None and 0.05 < d.received_frac < 0.95
        assert d.received_frac == pytest.approx(d.mask.mean())
        assert d.stats["given_up"] == 1.0 and d.stats["deadline_s"] == pytest.approx(wait_s)
        stats = ends[1].stats()
        assert stats["deadline_closes"] == 1 and stats["deadline_empty"] == 0
        assert stats["deadline_lost_floats"] == np.count_nonzero(~d.mask)
        if coded:   # coded again, what arrived is what was sent, the rest zero
            code = HadamardCode(0, 8192)
            sent, back = code.encode(values, 0, 1, 0), code.encode(d.values, 0, 1, 0)
            np.testing.assert_allclose(back[d.mask], sent[d.mask], atol=1e-5)
            np.testing.assert_allclose(back[~d.mask], 0.0, atol=1e-5)
        else:
            np.testing.assert_array_equal(d.values[d.mask], values[d.mask])
            assert not d.values[~d.mask].any()
    finally:
        for e in ends:
            e.close()


def test_nothing_arrived_is_all_lost_and_the_late_message_is_dropped():
    ends = on_free_ports(2, lambda ports: _pair({"timeout_max_ms": 20.0}, ports))
    try:
        lost = ends[1].recv(0, 1, 0, 20.0)   # nobody sends message 1 in time
        assert lost.received_frac == 0.0 and not lost.mask.any() and not lost.values.any()
        assert ends[1].stats()["deadline_empty"] == 1
        late, values = np.random.default_rng(2).normal(size=(2, N_FLOATS)).astype(np.float32)
        ends[0].send([1], 1, 0, late, 20.0)   # late: taken and dropped
        ends[0].send([1], 2, 0, values, 20.0)
        d = ends[1].recv(0, 2, 0, 20.0)
        assert d.received_frac == 1.0 and d.stats["given_up"] == 0.0
        np.testing.assert_allclose(d.values, values, atol=1e-5)
        ends[0].send([1], 3, 1, np.ones(1, np.float32), 20.0)   # a whole part is LTP's
        np.testing.assert_array_equal(ends[1].recv(0, 3, 1, 20.0).values, [1.0])
    finally:
        for e in ends:
            e.close()


def test_the_deadline_follows_the_part_samples():
    options = {"timeout_warmup": 3, "timeout_history": 3, "timeout_floor_ms": 0.5,
               "timeout_mult": 2.0}
    ends = on_free_ports(2, lambda ports: _pair(options, ports))
    try:
        values = np.ones(N_FLOATS, np.float32)
        for msg_id in range(1, 4):
            got = []
            thread = _receive_in_thread(ends[1], msg_id, got)
            ends[0].send([1], msg_id, 0, values, 20.0)
            thread.join()
            assert got[0].received_frac == 1.0 and got[0].stats["deadline_s"] == 30.0
        samples = sorted(ends[1].rule.samples[0])
        assert len(samples) == 3 and samples[-1] < 5.0
        want = max(2.0 * float(np.percentile(samples, 95)), 0.0005)
        assert ends[1].rule.timeout_s(0) == pytest.approx(want)
    finally:
        for e in ends:
            e.close()


def test_ring_and_tree_over_optireduce_learn_the_same_model(tmp_path):
    # Deadlines far beyond any step here (and the warm-up's 30 s): every part arrives whole,
    # coded; the ring's and the tree's means are the same up to float32 rounding.
    spec = RunSpec(transport="optireduce", transport_options={"timeout_mult": 1000.0},
                   n_workers=4, iterations=6, eval_every=3, port=17780, timeout_s=60,
                   pattern="ring:pieces=2")
    ring = _train(tmp_path / "ring", spec)
    tree = _train(tmp_path / "tree", spec.replace(pattern="tree:chunks=4", port=17800))
    accuracy = {name: [e.accuracy for e in files.eval_records()]
                for name, files in (("ring", ring), ("tree", tree))}
    assert accuracy["ring"] == pytest.approx(accuracy["tree"], abs=5e-3)
    assert accuracy["ring"][-1] > accuracy["ring"][0]
    for files in (ring, tree):
        rounds = files.ps_iterations()
        assert len(rounds) == 6 and all(r.recv_frac == [1.0] * 4 for r in rounds)
        for rank in range(4):
            stats = files.host_summary(worker_name(rank)).transport_stats
            assert stats["deadline_closes"] == 0
