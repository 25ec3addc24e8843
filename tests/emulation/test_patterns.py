"""The collective patterns on the real testbed (docs/collectives.md): a killed tree node does not
stop the run. (That a tree and a ring learn what the PS learns, and spare the PS's link, lab 7's
check shows on the testbed: tests/emulation/test_labs.py.)

Four workers through the star at 100 Mbit/s, a tree over LTP, the harness's fault injector
killing the last worker's process after iteration 5: the PS trains on with the three others, counts
the dead one missing, and the tree re-forms around it.
"""

from tests.emulation.conftest import incast_fixture, short_run

bed = incast_fixture("patterns", 4)


def test_a_killed_tree_node_does_not_stop_the_run(bed, tmp_path):
    row, _, iters = short_run(bed, tmp_path, 40, transport="ltp", pattern="tree", fault="kill@5")
    assert row["detected_as"] == "missing" and 0 < row["detection_s"] < 5
    assert row["iterations_lost"] >= 1
    # A known defect, not yet traced (docs/collectives.md, "Left"): over LTP a kill sometimes
    # makes one live worker count as missing once (1 of 12 tree runs with a fault in
    # results/patterns-faults). More than one would be a new fault.
    assert row["false_alarms"] <= 1
    assert row["recovered_s"] is not None and row["recovered_s"] < 10
    # every round after the re-forming held the three live workers
    assert iters[-1]["contributors"] == 3
    assert row["final_accuracy"] > 0.5
