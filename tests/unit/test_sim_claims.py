"""The scaling findings' statistics: a cell's median is over its runs, not its pushes."""

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from harness.reporting.publish.claims import simulation as sim


@dataclasses.dataclass
class _Folder:
    path: Path
    ok: pd.DataFrame


def _folder(tmp_path, pushes_by_seed):
    keys = {"transport": "ltp", "n_workers": 8, "bottleneck_mbps": 10000.0, "loss": "uniform:0",
            "delay_ms": 0.0, "queue_pkts": 256}
    its = [{**keys, "seed": seed, "iteration": i, "push_s": p, "iteration_s": 2 * p}
           for seed, ps in pushes_by_seed.items() for i, p in enumerate(ps)]
    pd.DataFrame(its).to_csv(tmp_path / "iterations.csv", index=False)
    runs = pd.DataFrame([{**keys, "seed": seed} for seed in pushes_by_seed])
    return _Folder(tmp_path, runs)


def test_a_cell_is_the_median_of_its_runs_medians_with_the_runs_coverage(tmp_path):
    # seed 3's pushes are many and large: a pooled median would follow them, the runs' does not
    f = _folder(tmp_path, {1: [1.0, 1.1, 1.2], 2: [2.0, 2.1, 2.2], 3: [9.0] * 30})
    cell = sim.cell_medians(f).iloc[0]
    assert cell["median"] == pytest.approx(2.1) and cell.n == 3
    assert (cell.lo, cell.hi) == (pytest.approx(1.1), pytest.approx(9.0))
    assert cell.coverage == pytest.approx(0.75)
    assert "coverage 75" in sim._bracket_text(sim.cell_medians(f))


def test_one_run_states_no_coverage(tmp_path):
    f = _folder(tmp_path, {1: [1.0, 1.1, 1.2]})
    assert "none stated (one run)" in sim._bracket_text(sim.cell_medians(f))
