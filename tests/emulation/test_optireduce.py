"""OptiReduce on the real testbed (docs/optireduce.md): a ring of four workers through the star at
100 Mbit/s under 5 % random loss trains to a sane accuracy, and its records show parts given up
at their deadlines.

The deadline is the 95th percentile of a part's recent times (``timeout_mult`` 1.0 here, the
default's 1.5 leaves more slack): under loss LTP's repairs make some parts slower than most, so
some must be given up with what had arrived, and the rounds that lost them show it in the PS's
records (a worker's lost coded floats count in its share of the round).
"""

from harness.running.runfiles import RunFiles
from harness.running.spec import RunSpec
from tests.emulation.conftest import incast_fixture, short_run
from topologies.incast import worker_name

bed = incast_fixture("optireduce", 4)

ITERATIONS = 40
RING = dict(transport="optireduce", transport_options={"timeout_mult": 1.0}, pattern="ring",
            loss_pct=5.0)


def test_a_ring_over_optireduce_trains_under_loss_and_gives_up_late_parts(bed, tmp_path):
    row, _, _ = short_run(bed, tmp_path, ITERATIONS, **RING)
    assert row["final_accuracy"] > 0.5, "chance is 0.1"
    params = bed[0].params
    spec = RunSpec(n_workers=params.n_workers, bottleneck_mbps=params.bottleneck_mbps,
                   iterations=ITERATIONS, eval_every=ITERATIONS, timeout_s=120, **RING)
    files = RunFiles(tmp_path / spec.run_id)
    stats = [files.host_summary(worker_name(r)).transport_stats for r in range(4)]
    given_up = sum(s["deadline_closes"] for s in stats)
    assert given_up > 0, "no part met its deadline at 5 % loss: nothing was tested"
    assert all(0 <= s["deadline_empty"] <= s["deadline_closes"] for s in stats), stats
    assert sum(s["deadline_lost_floats"] for s in stats) > 0
    rounds = files.ps_iterations()
    assert len(rounds) == ITERATIONS
    assert any(min(r.recv_frac) < 1.0 for r in rounds), "no round shows a part given up"
