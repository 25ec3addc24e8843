"""Training through failure on the real testbed: a worker killed, a link cut by the controller,
under TCP and LTP, and the three synchronisation modes, in their smallest form.

Every run must finish ``ok`` (never by waiting out its timeout), with the fault in
``raw/faults.jsonl`` and the PS's detection of it below :data:`DETECT_BOUND_S`: the PS's deadline
(``harness.hosts.ps.MISS_FLOOR_S``, 1 s at these speeds) plus one round. A killed TCP worker is seen
at once (its kernel ends the connection: ``gone``); LTP cannot tell a dead peer from a silent one,
so the deadline finds it (``missing``).
"""

import pytest

from harness.hosts import ps
from harness.running.runfiles import RunFiles
from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import incast_fixture

N_WORKERS = 3
ITERATIONS = 14
DETECT_BOUND_S = ps.MISS_FLOOR_S + 1.0
RUN_BOUND_S = 60.0   # a run that waited for its 120 s timeout would fail this


bed = incast_fixture("faults", N_WORKERS)


def _run(bed, tmp_path, iterations=ITERATIONS, **fields):
    tb, spawn = bed
    spec = RunSpec(n_workers=N_WORKERS, bottleneck_mbps=100, iterations=iterations,
                   eval_every=7, timeout_s=120, **fields)
    row, curves, iters = execute(tb, spec, tmp_path / spec.run_id, "test", spawn)
    assert row["status"] == "ok", row["reason"]
    assert row["iterations_done"] == iterations and row["final_accuracy"] > 0.3
    assert row["wall_s"] < RUN_BOUND_S
    return row, RunFiles(tmp_path / spec.run_id), iters


@pytest.mark.parametrize("transport", ["tcp-cubic", "ltp"])
def test_a_killed_worker_is_dropped_and_training_goes_on(bed, tmp_path, transport, clean_bed):
    row, files, iters = _run(bed, tmp_path, transport=transport, fault="kill@4")
    assert row["fault"] == "kill@4"
    assert [e["event"] for e in files.fault_events()] == ["killed"]
    assert row["detection_s"] is not None and 0 <= row["detection_s"] < DETECT_BOUND_S
    assert row["detected_as"] == ("gone" if transport.startswith("tcp") else "missing")
    if transport.startswith("tcp"):   # the kernel's reset or end of stream, not the deadline
        assert row["detection_s"] < 0.5
    # Every round after the kill averaged over the two others.
    assert row["iterations_lost"] >= ITERATIONS - 5
    assert [r["contributors"] for r in iters][-3:] == [N_WORKERS - 1] * 3


@pytest.mark.parametrize("transport", ["tcp-cubic", "ltp"])
def test_a_cut_link_is_detected_and_the_worker_comes_back(bed, tmp_path, transport, clean_bed):
    # Long enough (about 0.15 s a round) for the worker to come back after the link does: TCP
    # retransmits on its backed-off timer, LTP probes.
    row, files, iters = _run(bed, tmp_path, iterations=40, transport=transport,
                             fault="link@3:1s")
    assert [e["event"] for e in files.fault_events()] == ["cut", "restored"]
    assert row["detection_s"] is not None and 0 <= row["detection_s"] < DETECT_BOUND_S
    assert row["detected_as"] == "missing"
    assert row["rejoin_s"] is not None, "the worker never came back after the link was restored"
    assert iters[-1]["contributors"] == N_WORKERS
    assert 1 <= row["iterations_lost"] < 30


@pytest.mark.parametrize("sync", ["bsp", "ssp:1", "async"])
def test_sync_modes(bed, tmp_path, sync, clean_bed):
    row, files, _ = _run(bed, tmp_path, transport="ltp" if sync != "ssp:1" else "tcp-cubic",
                         sync=sync)
    assert row["sync"] == sync and row["fault"] == "none"
    records = files.ps_iterations()
    assert all(len(r.ranks) == N_WORKERS for r in records)
    if sync == "bsp":
        assert row["staleness_max"] == 0
    else:
        assert row["staleness_max"] >= 1   # gradients applied on parameters already moved on


@pytest.fixture
def clean_bed(bed):
    """The network is shared: after each test no link is still cut (the injector restores it)."""
    yield
    tb, _ = bed
    assert tb.meter.rtt_ms("w1") > 0 and tb.meter.rtt_ms(f"w{N_WORKERS}") > 0


@pytest.mark.parametrize("transport", ["tcp-cubic"])
def test_a_restarted_worker_rejoins_with_the_current_parameters(bed, tmp_path, transport,
                                                                clean_bed):
    row, files, iters = _run(bed, tmp_path, iterations=40, transport=transport,
                             fault="restart@3:1s")
    assert [e["event"] for e in files.fault_events()] == ["killed", "restarted"]
    assert row["detection_s"] is not None and row["detection_s"] < DETECT_BOUND_S
    assert row["rejoin_s"] is not None and row["rejoin_s"] < 5.0
    assert iters[-1]["contributors"] == N_WORKERS
    # The new process pushed a join message first, then trained on the PS's parameters.
    assert files.host_summary(f"w{N_WORKERS}.g1").iterations > 0
