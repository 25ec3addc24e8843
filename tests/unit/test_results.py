"""Results tables: schema, append-only writing, crash-safe reading, resume bookkeeping."""

import numpy as np
import pytest

from harness.running import results


def _row(run_id, **extra):
    row = {c: "" for c in results.names(results.RUNS_COLUMNS)}
    row.update(run_id=run_id, status="ok", **extra)
    return row


def test_columns_are_unique_and_documented():
    for columns in (results.RUNS_COLUMNS, results.CURVES_COLUMNS):
        names = results.names(columns)
        assert len(names) == len(set(names))
        assert all(c.description for c in columns)


def test_append_then_read_back(tmp_path):
    path = tmp_path / "runs.csv"
    results.append_rows(path, results.RUNS_COLUMNS, [_row("a", iters_per_s=np.float64(2.5))])
    results.append_rows(path, results.RUNS_COLUMNS, [_row("b", transport_options={"cc": "x"})])
    rows = results.read_rows(path)
    assert [r["run_id"] for r in rows] == ["a", "b"]
    assert rows[0]["iters_per_s"] == "2.5"
    assert rows[1]["transport_options"] == '{"cc": "x"}'
    assert path.read_text().count("run_id") == 1
    assert results.finished_run_ids(tmp_path) == {"a", "b"}


def test_half_written_last_line_is_ignored(tmp_path):
    path = tmp_path / "runs.csv"
    results.append_rows(path, results.RUNS_COLUMNS, [_row("a")])
    with open(path, "a") as f:
        f.write("b,smoke,ok")  # the machine died here
    assert [r["run_id"] for r in results.read_rows(path)] == ["a"]


def test_rows_must_match_the_schema(tmp_path):
    with pytest.raises(results.ResultsError, match="missing"):
        results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, [{"run_id": "a"}])


def test_other_schema_is_refused(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("run_id,something_else\n")
    with pytest.raises(results.ResultsError, match="new folder"):
        results.append_rows(path, results.RUNS_COLUMNS, [_row("a")])


def test_a_sweep_refuses_another_versions_tables_before_its_first_run(tmp_path):
    # It used to run a whole run first, append its curves and iterations, and only then refuse
    # runs.csv: a wasted run, orphan rows and an extended manifest in a folder it refused.
    from harness.running import presets
    from harness.running import engine

    (tmp_path / "runs.csv").write_text("run_id,something_else\n")
    (tmp_path / "curves.csv").write_text("untouched\n")
    plan = presets.get("smoke").override(transports=("tcp-cubic",), loss_pcts=(0.0,))
    with pytest.raises(results.ResultsError, match="new folder"):
        engine.unfinished(plan, tmp_path, print)
    assert not (tmp_path / "manifest.json").exists()
    assert (tmp_path / "curves.csv").read_text() == "untouched\n"


def test_drop_rows_of_an_interrupted_run(tmp_path):
    path = tmp_path / "curves.csv"
    rows = [{"run_id": rid, "scheme": "t", "transport": "t", "loss_pct": 0, "delay_ms": 0, "seed": 0, "iteration": i,
             "time_s": 0.0, "accuracy": 0.5, "test_loss": 1.0, "sync": "bsp", "fault": "none",
             "byzantine": "0", "aggregator": "mean"}
            for rid in ("a", "b") for i in range(3)]
    results.append_rows(path, results.CURVES_COLUMNS, rows)
    results.drop_rows(path, "a")
    assert {r["run_id"] for r in results.read_rows(path)} == {"b"}


def test_schema_doc_is_current():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "results-schema.md").read_text()
    assert results.schema_markdown() in doc, "regenerate docs/results-schema.md (invoke docs)"
