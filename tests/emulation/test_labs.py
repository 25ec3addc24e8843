"""Every command of every teaching lab runs, in its smallest form (few iterations, two workers).

The commands are read from the labs' ``sh`` blocks, so the pages and this test cannot drift
apart. Sweeps are written to a temporary folder instead of ``results/``.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest

from harness.running import results
from harness.training import models

PROJECT = Path(__file__).resolve().parents[2]
LABS = sorted((PROJECT / "docs" / "labs").glob("lab*.md"))


def lab_commands(page: Path) -> list[str]:
    """The command lines of a lab page's ``sh`` code blocks, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def smallest(command: str, out: Path, drawn_later: bool = False) -> str:
    """The command in its smallest form, writing under ``out`` instead of ``results/``; a sweep
    whose figures a later command of the lab draws (``drawn_later``) leaves them to it."""
    command = re.sub(r"results/(lab\d[\w-]*)", lambda m: str(out / m.group(1)), command)
    if " run-sweep " in command + " ":
        preset = re.search(r"--preset (\S+)", command).group(1)
        if "--out" not in command:
            command += f" --out {out / preset}"
        if preset == "lab4":   # its faults must strike within the run, and a worker survive
            command += " --iterations 10 --workers 2 --fault none,kill@4,link@4:1s"
        elif preset == "lab6":   # peer to peer: no --workers, the fabric is the preset's
            command += " --iterations 3"
        elif preset == "lab2":   # no loss and the most: every statement has a case
            command += " --iterations 3 --workers 2 --loss 0,10"
        elif preset == "lab5":   # one attacker of four, the defence tolerating one
            command += (" --iterations 10 --workers 4 --byzantine 0,1:sign-flip --tolerate 1"
                        " --aggregator mean,score")
        else:
            command += " --iterations 3 --workers 2"
        if drawn_later:
            command += " --no-figures"
    if " bench-network" in command:
        command += " --seconds 1"
    return command


def check_lab2(rows: list[dict], folder: Path) -> None:
    """Lab 2's "What you should observe", statement by statement, on the data its commands made."""
    def num(row, column):
        return float(row[column])

    for row in rows:
        where = f"{row['scheme']} at {row['loss_pct']} % loss"
        lossy = num(row, "loss_pct") >= 5
        if row["scheme"] == "ltp-reliable":  # statement 1
            assert num(row, "early_closes") == 0 and num(row, "filled_frac_max") == 0, where
            assert num(row, "min_recv_frac") == 1.0, where
            assert not lossy or num(row, "retransmits") > 0, where
        else:
            floor = json.loads(row["transport_options"])["threshold_min"]
            assert num(row, "min_recv_frac") >= floor - 1e-9, where  # statement 2
            assert num(row, "filled_frac_max") <= 1 - floor + 1e-9, where
            if lossy:  # statement 3
                assert num(row, "retransmits") > 0, where
                assert num(row, "filled_frac_mean") < num(row, "loss_pct") / 100, where
        if num(row, "early_closes") == 0:  # statement 4
            assert num(row, "filled_frac_max") == 0, where


def check_lab4(rows: list[dict], folder: Path) -> None:
    """What lab 4's students explain: the PS noticed the kill (TCP by the reset, LTP by the
    deadline) and trained on."""
    kills = {r["scheme"]: r for r in rows if r["fault"].startswith("kill")}
    assert kills["tcp-cubic"]["detected_as"] == "gone"
    assert kills["ltp"]["detected_as"] == "missing"
    assert all(float(r["detection_s"]) < 2.0 for r in kills.values())
    assert "Training through failure" in (folder / "report.md").read_text()


def check_lab5(rows: list[dict], folder: Path) -> None:
    """What lab 5's students see: averaging keeps every attacker's update and ends worse than
    score-based validation, which rejects nearly all of them and keeps the honest ones."""
    cell = {(r["byzantine"], r["aggregator"]): r for r in rows}
    attacked = [r for r in rows if r["byzantine"] != "0"]
    assert attacked and all(int(r["byzantine_updates"]) > 0 for r in attacked)
    mean, score = cell[("1:sign-flip", "mean")], cell[("1:sign-flip", "score")]
    assert mean["byzantine_kept"] == mean["byzantine_updates"]
    assert int(score["byzantine_kept"]) <= 0.2 * int(score["byzantine_updates"])
    assert int(score["honest_rejected"]) <= 0.1 * int(score["honest_updates"])
    assert float(score["final_accuracy"]) > float(mean["final_accuracy"])
    assert float(score["agg_p50_s"]) > float(mean["agg_p50_s"])
    assert "Byzantine workers and aggregation rules" in (folder / "report.md").read_text()


def check_lab6(rows: list[dict], folder: Path) -> None:
    """Lab 6's "What you should observe", on its own rows: random-p sends to exactly p, selmcast
    to at least p, broadcast to everyone; everything sent arrives; unicast copies load the
    leaf-spine links more than the switches' copies for the same policy."""
    cell = {(r["policy"], r["copy"]): r for r in rows}
    for r in rows:
        assert float(r["delivered_p"]) == float(r["avg_p"]), r["method"]
    p, n = int(rows[0]["p"]), int(rows[0]["n_workers"])
    assert float(cell[("random-p", "switch")]["avg_p"]) == p
    assert float(cell[("selmcast", "switch")]["avg_p"]) >= p
    assert float(cell[("broadcast", "switch")]["avg_p"]) == n - 1
    per_receiver = {c: float(cell[c]["trunk_bytes_per_round"]) / float(cell[c]["avg_p"])
                    for c in (("selmcast", "switch"), ("selmcast", "unicast"))}
    assert per_receiver[("selmcast", "unicast")] > per_receiver[("selmcast", "switch")]
    assert "random-p against selmcast" in (folder / "report.md").read_text()


def check_lab7(rows: list[dict], folder: Path) -> None:
    """Lab 7's "What you should observe": about N gradients cross the PS's link per iteration
    through the PS, about one through the tree, almost none through the ring; the same accuracy."""
    gradient = 4 * models.n_params("mlp")
    for scheme in {r["scheme"] for r in rows}:
        cell = {r["pattern"]: r for r in rows if r["scheme"] == scheme}
        per = {p: float(r["bottleneck_tx_bytes"]) / float(r["iterations_done"]) / gradient
               for p, r in cell.items()}
        n = int(cell["ps"]["n_workers"])
        assert n - 0.5 < per["ps"] < 1.2 * n + 0.5, (scheme, per)
        assert 0.9 < per["tree"] < 1.5, (scheme, per)
        done = float(cell["ring"]["iterations_done"])
        assert per["ring"] < 1.2 / done + 0.05, (scheme, per)   # the model for the evaluation
        accuracy = {p: float(r["final_accuracy"]) for p, r in cell.items()}
        assert max(accuracy.values()) - min(accuracy.values()) < 2e-3, (scheme, accuracy)
    assert "Collectives against their bounds" in (folder / "report.md").read_text()


def check_lab8(rows: list[dict], folder: Path) -> None:
    """Lab 8's "What you should observe": every design ran under the trace, and its PS dropped
    exactly the positions the trace holds, as far as its run reached."""
    from topologies.impair.trace import read_trace, same_positions

    trace = read_trace(PROJECT / "docs" / "labs" / "traces" / "lab8" / "ps1.trace")
    for row in rows:
        assert row["loss_model"].startswith("trace:"), row["loss_model"]
        met = read_trace(folder / "runs" / row["run_id"] / "loss" / "ps1.trace")
        assert met.packets > 0 and same_positions(trace, met), row["scheme"]
        assert int(row["random_drops"]) > 0, (row["scheme"], "met no drop of the trace")


# What each lab page says its commands show, checked on the tables they wrote.
OBSERVATIONS = {"lab2-tolerating-loss": check_lab2, "lab4-killing-a-worker": check_lab4,
                "lab5-byzantine-workers": check_lab5, "lab6-peer-to-peer": check_lab6,
                "lab7-the-incast-vanishes": check_lab7, "lab8-ranking-on-one-trace": check_lab8}


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.stem)
def test_lab_commands_run(page, tmp_path, clean_machine):
    commands = lab_commands(page)
    for i, command in enumerate(commands):
        drawn_later = any(" figures --sweep " in later for later in commands[i + 1:])
        small = smallest(command, tmp_path, drawn_later)
        proc = subprocess.run(["bash", "-c", small], cwd=PROJECT, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, f"{small}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    sweeps = list(tmp_path.glob("lab*/runs.csv"))
    assert sweeps, "the lab ran no sweep"
    for runs in sweeps:
        rows = results.read_rows(runs)
        bad = [(r["scheme"], r["loss_pct"], r["status"], r["reason"][:80]) for r in rows
               if r["status"] != "ok"]
        assert rows and not bad, f"{runs.parent.name}: runs that did not finish: {bad}"
        if page.stem != "lab6-peer-to-peer":   # the peer-to-peer report has its own shape
            assert "Headline numbers" in (runs.parent / "report.md").read_text()
        if page.stem in OBSERVATIONS:
            OBSERVATIONS[page.stem](rows, runs.parent)
