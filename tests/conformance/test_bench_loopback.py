"""The loopback benchmark's runs for real (harness/bench/kind.py): a PS transport and a
peer-to-peer one each push over 127.0.0.1 into a folder through the sweep loop, which keeps a
row per push and per run with the code's fingerprint. Small messages, two pushes: a check that
the path works, not a measurement (``invoke bench-transport --loopback-only`` is that)."""

import pytest

from harness.bench import kind, loopback
from harness.running import engine
from harness.running.results import read_table


@pytest.mark.parametrize("scheme", ["ltp", "peer-mcast", "peer-tcp"])
def test_a_scheme_pushes_into_a_loopback_folder(scheme, tmp_path):
    engine.run_plan(kind.plan([scheme], [40_000], 2, 1), tmp_path, progress=lambda line: None,
                    figures=False)
    runs = read_table(tmp_path / "runs.csv")
    assert list(runs.status) == ["ok"], runs.reason.tolist()
    assert runs.goodput_gbps.iloc[0] > 0 and runs.cpu_s_per_gb.iloc[0] > 0
    (got,) = loopback.from_tables(tmp_path)
    assert (got.scheme, got.n_bytes, len(got.push_s)) == (scheme, 40_000, 2)
