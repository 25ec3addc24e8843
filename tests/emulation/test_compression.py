"""Compressed pushes on the real testbed (docs/compression.md): the saving is measured at the
switch, not computed.

Four workers, 100 Mbit/s, 15 rounds each: uncompressed LTP against top-1 % pushes with error
feedback, and against scaled-sign pushes over TCP. The bytes the switch sent toward the PS per
round (its port counters: parameters never cross that direction, so this is the pushes plus
protocol traffic) fall to a small fraction of the uncompressed run's, as do the transports' own
counts; the models still learn. At 10 % random loss over LTP, lost index-value pairs are dropped
by the PS, counted, and the run still learns. Under CSER's error reset (``reset_mode`` cser)
every worker spends every fifth round (``R = 4``) synchronising its residual, all of them in the
same rounds, and the PS's model still learns.
"""

from harness.running.runfiles import RunFiles
from tests.emulation.conftest import incast_fixture, short_run
from topologies.incast import worker_name

ITERATIONS = 15
bed = incast_fixture("compression", 4)


def _run(bed, tmp_path, **fields):
    row, curves, _ = short_run(bed, tmp_path, ITERATIONS, **fields)
    assert curves[-1]["accuracy"] > curves[0]["accuracy"] + 0.2   # it learns
    return row


def _switch_per_round(row):
    return row["bottleneck_tx_bytes"] / row["iterations_done"]


def test_compressed_pushes_cut_the_bytes_the_switch_carries(bed, tmp_path):
    dense = _run(bed, tmp_path, transport="ltp")
    topk = _run(bed, tmp_path, transport="ltp", compress="topk:0.01", error_reset=0)
    sign = _run(bed, tmp_path, transport="tcp-cubic", compress="sign", local_steps=2)
    # top-1 %: pairs of 2.0 % of the floats; sign: 1/32 of them plus a scale per layer
    assert _switch_per_round(topk) < 0.06 * _switch_per_round(dense)
    assert _switch_per_round(sign) < 0.08 * _switch_per_round(dense)
    assert topk["wire_bytes_per_iter"] < 0.05 * dense["wire_bytes_per_iter"]
    assert sign["wire_bytes_per_iter"] < 0.06 * dense["wire_bytes_per_iter"]
    # the transports' counts and the switch's agree on what crossed (headers and ACKs aside)
    for row in (dense, topk, sign):
        assert row["wire_bytes_per_iter"] <= 1.2 * _switch_per_round(row)
    assert topk["compress"] == "topk:0.01" and topk["error_reset"] == 0
    assert sign["local_steps"] == 2 and dense["compress_dropped"] == 0


def test_lost_pairs_are_dropped_and_counted(bed, tmp_path):
    """A fixed early-close threshold of 0.8 at 10 % loss: a compressed push of six datagrams
    that lost one in its first pass closes without it, and its pairs are dropped at the PS."""
    row = _run(bed, tmp_path, transport="ltp",
               transport_options={"threshold_min": 0.8, "threshold_max": 0.8},
               loss_pct=10.0, compress="topk:0.01", error_reset=0)
    assert row["early_closes"] > 0 and row["min_recv_frac"] >= 0.8
    assert row["compress_dropped"] > 0


def test_cser_spends_every_fifth_round_on_the_residual(bed, tmp_path):
    iterations, reset = 30, 4
    fields = dict(transport="ltp", compress="topk:0.01", reset_mode="cser", error_reset=reset)
    row, curves, _ = short_run(bed, tmp_path, iterations, **fields)
    assert row["reset_mode"] == "cser" and row["error_reset"] == reset
    # R gradient rounds, then one synchronisation: 30 rounds hold 6 of them per worker
    assert row["residual_syncs"] == iterations // (reset + 1) == 6
    run = RunFiles(tmp_path / row["run_id"])
    for r in range(4):   # bsp: every worker in the same rounds (the same message ids)
        records = run.worker_iterations(worker_name(r))
        assert [rec.residual_sync for rec in records] == [i % 5 == 4 for i in range(iterations)]
    assert curves[-1]["accuracy"] > 0.3 > curves[0]["accuracy"]   # chance is 0.1
