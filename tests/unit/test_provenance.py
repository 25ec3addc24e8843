"""Provenance: the code fingerprint, freshness, the machine, and the load of other processes."""

import json
from pathlib import Path

import pandas as pd

from harness.running import provenance
from harness.running import fingerprint


def test_comments_docstrings_and_layout_do_not_change_a_file_hash(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text('"""Doc."""\n\ndef f(x):\n    """F."""\n    return x + 1\n')
    b.write_text('"""Other doc."""\n# a comment\n\ndef f(x):\n\n        """Says f, at length."""\n'
                 '        return x + 1  # why\n')
    c.write_text('"""Doc."""\n\ndef f(x):\n    return x + 2\n')
    assert fingerprint.file_hash(a) == fingerprint.file_hash(b) != fingerprint.file_hash(c)
    x, y = tmp_path / "x.c", tmp_path / "y.c"
    x.write_text("/* doc */ int f(void) { return 1; } // why\n")
    y.write_text("int f(void)\n{\n    return 1;\n}\n")
    assert fingerprint.file_hash(x) == fingerprint.file_hash(y)


def test_the_fingerprint_of_training_runs_covers_the_measuring_code_only():
    fp = provenance.fingerprint("ps")
    files = set(fp.files)
    assert {"harness/hosts/node.py", "harness/hosts/ps.py", "harness/running/runner.py",
            "transports/ltp.py", "topologies/testbed/network.py",
            "transports/native/src/ltp_core.c", "topologies/impair/delay/nfq_delay.c"} <= files
    assert not files & {"harness/reporting/report.py", "harness/reporting/stats.py",
                        "harness/reporting/figures.py", "harness/running/presets.py",
                        "harness/running/provenance.py", "harness/hosts/bench.py",
                        "harness/training/__init__.py"}
    assert fp.digest == fingerprint.digest_of(fp.files.values())
    # a moved file keeps the digest: it is over the hashes, not the paths
    assert fingerprint.digest_of(reversed(list(fp.files.values()))) == fp.digest


def _folder(tmp_path: Path, digest: str, files: dict) -> Path:
    pd.DataFrame({"run_id": ["a", "b"], "status": ["ok", "ok"], "git_commit": ["c1", "c1"],
                  "code_fingerprint": [digest, digest]}).to_csv(tmp_path / "runs.csv",
                                                                index=False)
    (tmp_path / "manifest.json").write_text(json.dumps({"provenance": {"fingerprint": {
        "kind": "ps", "digest": digest, "files": files, "rule": fingerprint.RULE}}}))
    return tmp_path


def test_a_folder_is_fresh_only_at_todays_fingerprint(tmp_path):
    today = provenance.fingerprint("ps")
    fresh = provenance.freshness(_folder(tmp_path / "f", today.digest, today.files)
                                 if (tmp_path / "f").mkdir() is None else None, today)
    assert fresh.fresh and fresh.text().startswith("Fresh")
    old = dict(today.files, **{"harness/hosts/ps.py": "0" * 16})
    (tmp_path / "s").mkdir()
    stale = provenance.freshness(_folder(tmp_path / "s", "feedbeef0000", old), today)
    assert not stale.fresh and stale.changed == ("harness/hosts/ps.py",)
    assert "Stale: code changed since" in stale.text() and "`harness/hosts/ps.py`" in stale.text()


def test_a_collective_run_records_the_collectives_code_and_a_ps_run_does_not(tmp_path):
    ps, collective = provenance.fingerprint("ps"), provenance.fingerprint("collective")
    tree = {"harness/hosts/tree.py", "harness/hosts/ring.py", "harness/hosts/directory.py",
            "harness/hosts/collective.py"}
    assert not tree & set(ps.files) and tree <= set(collective.files)
    assert set(ps.files) < set(collective.files)
    assert [fingerprint.run_kind(p) for p in ("ps", "tree:fanout=2", "ring")] == \
        ["ps", "collective", "collective"]
    # a folder of both: each run is compared with today's code of its own pattern's kind
    pd.DataFrame({"run_id": ["a", "b"], "status": ["ok", "ok"], "pattern": ["ps", "tree"],
                  "code_fingerprint": [ps.digest, collective.digest]}).to_csv(
        tmp_path / "runs.csv", index=False)
    both = provenance.freshness(tmp_path)
    assert both.fresh and both.kind == "collective and ps"
    pd.DataFrame({"run_id": ["a", "b"], "status": ["ok", "ok"], "pattern": ["ps", "tree"],
                  "code_fingerprint": [ps.digest, ps.digest]}).to_csv(
        tmp_path / "runs.csv", index=False)
    assert not provenance.freshness(tmp_path).fresh


def test_an_all_digit_fingerprint_is_still_a_fingerprint(tmp_path):
    today = provenance.fingerprint("ps")
    today = fingerprint.Fingerprint(today.kind, "265933038540", today.files, today.rule)
    fresh = provenance.freshness(_folder(tmp_path, today.digest, today.files), today)
    assert fresh.fresh and fresh.unknown_runs == 0 and fresh.recorded == ("265933038540",)


def test_a_folder_without_fingerprints_is_stale(tmp_path):
    pd.DataFrame({"run_id": ["a"], "status": ["ok"], "git_commit": ["c1"]}).to_csv(
        tmp_path / "runs.csv", index=False)
    f = provenance.freshness(tmp_path)
    assert not f.fresh and f.unknown_runs == 1


def test_the_machine_is_recorded():
    m = provenance.run_columns()
    assert m["cpu_cores"] >= 1 and m["kernel"] and "torch" in json.loads(m["versions"])


class _Procs:
    """A fake /proc: (pid, start) -> (ppid, flags, cpu ticks incl. reaped children)."""

    def __init__(self, table):
        self.table = table

    def __call__(self):
        return dict(self.table)


def test_other_load_counts_only_what_others_used_during_the_run():
    hz = provenance._TICKS_PER_S
    procs = _Procs({(100, 1): (1, 0, 0),          # the sweep
                    (101, 2): (100, 0, 50 * hz),  # a host process: ours
                    (200, 3): (1, 0, 10 * hz),    # someone else's shell
                    (201, 4): (200, 0, 30 * hz),  # its child, running since before
                    (300, 5): (2, 0, 99 * hz)})   # a kernel thread (child of kthreadd)
    now = [0.0]
    meter = provenance.LoadMeter(table=procs, clock=lambda: now[0], root_pid=100)
    meter.start()
    # 10 s later: our host used 20 s (not counted); the child used 4 s more and ended, so its
    # parent reaped all 34 s; a new foreign process used 2 s
    procs.table = {(100, 1): (1, 0, 0), (101, 2): (100, 0, 70 * hz),
                   (200, 3): (1, 0, (10 + 34) * hz), (300, 5): (2, 0, 500 * hz),
                   (400, 9): (1, 0, 2 * hz)}
    now[0] = 10.0
    cores = provenance.os.cpu_count()
    assert meter.stop() == round((4 + 2) / (cores * 10.0), 4)


def test_the_hash_rule_is_frozen(tmp_path):
    """Every recorded fingerprint was computed with one of these rules: changing one would make
    every folder it recorded stale at once. Change the rule only with a new number, and translate
    (``provenance.translate``) or rerun every fresh folder."""
    py, c = tmp_path / "pin.py", tmp_path / "pin.c"
    py.write_text('"""Doc."""\nimport os  # why\n\n\ndef f(x):\n    """F."""\n'
                  '    return os.sep + x\n')
    c.write_text("/* doc */\nint f(void) { return 1; } // why\n")
    assert fingerprint.file_hash(py, rule=1) == "3d1b36da798c886f"
    assert fingerprint.file_hash(py, rule=2) == "02fc8794c4129af9"
    assert fingerprint.file_hash(c) == fingerprint.file_hash(c, rule=1) == "f164f72ced4b9d66"


def test_a_move_changes_no_hash_but_any_other_token_does(tmp_path, monkeypatch):
    """Rule 2: importers of a moved module, the order their lines take after the move, a string
    naming the module, and a climb to the project root from one folder deeper hash as before; a
    different binding or any other token does not."""
    monkeypatch.setattr(fingerprint, "MOVES", {"harness.training.models": "harness.models"})
    old = "harness" + ".models"   # spelled apart: the project's own renames leave it alone

    def h(text: str, rel: str = "") -> str | None:
        (tmp_path / "m.py").write_text(text)
        return fingerprint.file_hash(tmp_path / "m.py", rel=rel)

    before = h(f'from harness import models, runner\n\nRUN = ("{old}", models.MLP)\n')
    assert before == h('from harness import runner\nfrom harness.training import models\n\n'
                       'RUN = ("harness.training.models", models.MLP)\n')
    assert before == h('from harness.training import models\nfrom harness import runner\n\n'
                       f'RUN = ("{old}", models.MLP)\n')
    assert before != h('from harness import runner\nfrom harness.training import models as m\n'
                       f'\nRUN = ("{old}", m.MLP)\n')
    assert before != h(f'from harness import models, runner\n\nRUN = ("{old}", models.CNN)\n')
    root = h("ROOT = Path(__file__).resolve().parent.parent\n", "harness/m.py")
    assert root == h("ROOT = Path(__file__).resolve().parents[2]\n", "harness/training/m.py")
    assert root != h("ROOT = Path(__file__).resolve().parents[1]\n", "harness/training/m.py")
    assert h('"""A package: only its docstring."""\n') is None
    assert h('"""A package."""\n\nX = 1\n') is not None


def test_a_folder_recorded_under_the_earlier_rule_is_fresh_through_its_translation(tmp_path):
    today = provenance.fingerprint("ps")
    folder = _folder(tmp_path, "0123456789ab", {"harness/hosts/ps.py": "0" * 16})
    man = json.loads((folder / "manifest.json").read_text())
    man["translated_fingerprints"] = {"0123456789ab": today.as_dict()}
    (folder / "manifest.json").write_text(json.dumps(man))
    fresh = provenance.freshness(folder, today)
    assert fresh.fresh and "recorded as 0123456789ab" in fresh.text()
    man["translated_fingerprints"] = {"0123456789ab": dict(today.as_dict(), digest="feed")}
    (folder / "manifest.json").write_text(json.dumps(man))
    assert not provenance.freshness(folder, today).fresh


def _committed_sweep(tmp_path: Path, edit) -> tuple[Path, list[dict]]:
    """A copy of the committed ``results/default-check`` under today's columns (a column it
    lacks left empty), whose runs.csv rows ``edit`` changed in place (rows as dicts: delete a
    key to drop that column)."""
    import csv
    import io

    from harness.running import kinds, results

    src = Path(__file__).resolve().parents[2] / "results" / "default-check"
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "manifest.json").write_bytes((src / "manifest.json").read_bytes())
    for name, columns in kinds.of("ps").tables.items():
        header = results.names(columns)
        rows = [{h: row.get(h, "") for h in header}
                for row in csv.DictReader(open(src / name, newline=""))]
        if name == "runs.csv":
            edit(rows)
            header, runs = list(rows[0]), rows
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        (folder / name).write_text(out.getvalue())
    return folder, runs


def test_redo_takes_out_exactly_the_runs_it_names_and_keeps_every_other_line(tmp_path):
    import csv
    import io

    from harness.running import engine, kinds, results

    def ids(text: str) -> list[str]:
        return [row["run_id"] for row in csv.DictReader(io.StringIO(text))]

    def edit(rows):   # today's code for every run but one; the busiest ran on a loaded machine
        for row in rows:
            row["code_fingerprint"] = fingerprint.fingerprint("ps").digest
        rows[0]["code_fingerprint"] = "0123456789ab"

    folder, rows = _committed_sweep(tmp_path, edit)
    before = {name: (folder / name).read_text() for name in ("runs.csv", "curves.csv",
                                                             "iterations.csv")}
    loads = [float(r["other_load_frac"] or 0) for r in rows]
    limit = max(loads) - 1e-9
    expect = {rows[0]["run_id"]} | {r["run_id"] for r, x in zip(rows, loads) if x > limit}
    assert engine.parse_redo("") == engine.Redo() and not engine.Redo()
    redo = engine.parse_redo(f"stale, loaded:{limit!r}")
    taken = engine.redo_runs(kinds.of("ps"), folder, redo, progress=lambda _: None)
    assert taken == len(expect) == 2
    for name, text in before.items():
        lines, after = text.splitlines(), (folder / name).read_text()
        kept = [ln for ln, i in zip(lines[1:], ids(text)) if i not in expect]
        assert after.splitlines() == [lines[0]] + kept and set(ids(after)).isdisjoint(expect)
    assert set(results.finished_run_ids(folder)).isdisjoint(expect)


def test_a_redo_text_that_names_nothing_known_is_one_sentence():
    import pytest
    from harness.running import engine

    for bad in ("everything", "loaded", "loaded:2", "stale:1"):
        with pytest.raises(engine.SweepError, match=r"^--redo .*comma-separated\.$"):
            engine.parse_redo(bad)
    assert engine.parse_redo("failed,stale") == engine.Redo(stale=True, failed=True)


def test_redo_begins_tables_of_other_columns_again_only_when_every_run_runs_again(tmp_path):
    import pytest

    from harness.running import engine, kinds, results

    def older(rows):   # an older harness (no other_load_frac column), older code, every run
        for row in rows:
            del row["other_load_frac"]
            row["code_fingerprint"] = "0123456789ab"

    folder, rows = _committed_sweep(tmp_path, older)
    kind = kinds.of("ps")
    with pytest.raises(engine.SweepError, match="other columns"):
        engine.redo_runs(kind, folder, engine.parse_redo("failed"), progress=lambda _: None)
    assert engine.redo_runs(kind, folder, engine.parse_redo("stale"),
                            progress=lambda _: None) == len(rows)
    results.check_tables(folder, kind.tables)   # today's columns now, and no row
    assert not results.finished_run_ids(folder)
