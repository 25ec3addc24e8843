"""The loopback findings (harness/reporting/publish/claims/loopback.py): ratios paired by
repetition, and issue 28's two targets judged met, missed or undecided by the stated rule. The
runs are made up; no transport runs here."""

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import loopback

MB4 = loopback.TARGET_BYTES


def _runs(ltp_goodput, ltp_cpu, tcp_goodput=10.0, tcp_cpu=1.0, size=MB4):
    rows = []
    for r, (g, c) in enumerate(zip(ltp_goodput, ltp_cpu)):
        rows.append({"transport": "ltp", "bytes": size, "repeat": r, "pushes": 20,
                     "goodput_gbps": g, "cpu_s_per_gb": c})
        rows.append({"transport": "tcp-cubic", "bytes": size, "repeat": r, "pushes": 20,
                     "goodput_gbps": tcp_goodput, "cpu_s_per_gb": tcp_cpu})
    return pd.DataFrame(rows)


def test_ratios_pair_repetitions():
    runs = _runs([5, 20, 10], [2, 1, 3])
    runs.loc[(runs.transport == "tcp-cubic") & (runs.repeat == 1), "goodput_gbps"] = 40.0
    est = loopback.ratio(runs, "ltp", MB4, "goodput_gbps")
    assert (est.value, est.n) == (0.5, 3)   # per repetition 0.5, 0.5, 1.0


def test_targets_met_missed_and_undecided():
    with stats.tally():
        met = loopback.targets(_runs([12, 13, 14, 15, 16, 12, 13, 14, 15],
                                     [1.1, 1.2, 1.0, 1.3, 1.1, 1.2, 1.0, 1.1, 1.2]))
        missed = loopback.targets(_runs([2, 3, 2, 3, 2, 3, 2, 3, 2], [4, 5, 4, 5, 4, 5, 4, 5, 4]))
        mixed = loopback.targets(_runs([8, 12, 9, 11, 10, 8, 12, 9, 11],
                                       [1, 2, 1, 2, 1.5, 1, 2, 1, 2]))
    assert "goodput" in met[0] and "**met**" in met[0] and "**met**" in met[1]
    assert "**missed**" in missed[0] and "**missed**" in missed[1]
    assert "**undecided" in mixed[0] and "**undecided" in mixed[1]


def test_targets_need_both_schemes_at_4_mb():
    got = loopback.targets(_runs([1, 2, 3], [1, 1, 1], size=437544))
    assert "not judged" in got[0]


def test_the_peer_transports_share_of_a_round():
    # peer-mcast at 10 CPU s/GB; a p2p round of 0.5 s moving 20 MB over access links (10 MB sent,
    # 10 MB received) on 2 cores needs 0.1 CPU s: 10 % of the machine's 1 core-second.
    runs = pd.DataFrame([{"transport": t, "bytes": 437544, "repeat": r, "pushes": 20,
                          "goodput_gbps": 1.0, "cpu_s_per_gb": c}
                         for r in range(3) for t, c in (("peer-mcast", 10.0), ("ltp", 0.5))])
    p2p = pd.DataFrame({"scheme": ["mcast", "mcast+close_frac=0.9", "tcp"],
                        "access_bytes_per_round": [20e6, 20e6, 20e6], "round_s": [0.5, 0.5, 0.5],
                        "cpu_cores": [2, 2, 2]})
    text = "\n".join(loopback.peer_share(runs, p2p))
    assert "`mcast` in `results/p2p/` (2 runs)" in text and "10.0 %" in text
    assert "`tcp`" not in text.split("\n\n")[1]   # no loopback runs of peer-tcp: no estimate
    assert "0.500" in text   # the native core's CPU per GB beside it
