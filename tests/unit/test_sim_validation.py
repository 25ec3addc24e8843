"""The simulator's validation table and what the scaling findings make of it."""

from harness.reporting.publish.claims import simvalidation as sv
from harness.running.results import SIM_VALIDATION_COLUMNS, append_rows
from harness.simulation import validate


def _row(transport, n, within, today=True):
    sim, testbed = sv._today() if today else ("0" * 12, "0" * 12)
    return {"transport": transport, "n_workers": n, "loss_pct": 0.0, "host": "ideal",
            "seeds": "1+2+3", "emulated_pushes": 20, "simulated_pushes": 60,
            "emulated_median_s": 1.0, "simulated_median_s": 1.0 if within else 1.3,
            "emulated_p99_s": 1.0, "simulated_p99_s": 1.0, "median_ratio": 1.0 if within else 1.3,
            "p99_ratio": 1.0, "within_targets": within, "git_commit": "abc",
            "code_fingerprint": sim, "testbed_fingerprint": testbed}


def _table(tmp_path, monkeypatch, rows):
    monkeypatch.setattr(sv, "PROJECT", tmp_path)
    (tmp_path / sv.REL).parent.mkdir(parents=True)
    append_rows(tmp_path / sv.REL, SIM_VALIDATION_COLUMNS, rows)


def test_tcp_comparisons_are_withdrawn_while_the_model_misses_a_target(tmp_path, monkeypatch):
    _table(tmp_path, monkeypatch, [_row("ltp", 8, True), _row("tcp-cubic", 8, True),
                                   _row("tcp-cubic", 16, False)])
    assert not sv.tcp_passed() and sv.withdrawn().startswith("*Withdrawn")
    assert "0 of" not in sv.block(None) and "1 of 2 cells" in sv.block(None)


def test_tcp_comparisons_stand_once_every_fresh_row_meets_the_targets(tmp_path, monkeypatch):
    _table(tmp_path, monkeypatch, [_row("tcp-cubic", 8, True), _row("tcp-cubic", 16, True)])
    assert sv.tcp_passed() and sv.withdrawn() == ""


def test_stale_rows_pass_nothing(tmp_path, monkeypatch):
    _table(tmp_path, monkeypatch, [_row("tcp-cubic", 8, True, today=False)])
    assert not sv.tcp_passed() and "Stale" in sv.block(None)


def test_no_table_withdraws(tmp_path, monkeypatch):
    monkeypatch.setattr(sv, "PROJECT", tmp_path)
    assert sv.withdrawn() and "Not measured yet" in sv.block(None)


def test_a_comparison_row_fits_the_table(tmp_path):
    rows = validate.compare({8: [1.0, 1.1, 1.2]}, {8: [1.0, 1.05, 1.3]})
    row = validate.table_row("ltp", 0.0, "ideal", [1, 2], rows[0])
    append_rows(tmp_path / "validation.csv", SIM_VALIDATION_COLUMNS, [row])
    assert row["seeds"] == "1+2" and row["within_targets"] is True
