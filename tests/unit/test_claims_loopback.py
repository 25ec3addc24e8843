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


def _steady(third: tuple[str, float, float]) -> list[dict]:
    """Nine repetitions of TCP (80 Gbit/s, 0.2 CPU s/GB), the MAC alone (50, 0.15) and a third
    scheme (name, Gbit/s, CPU s/GB), every run alike, on 2 cores."""
    return [{"transport": t, "bytes": MB4, "repeat": r, "pushes": 20, "goodput_gbps": g,
             "cpu_s_per_gb": c, "cpu_cores": 2}
            for r in range(9)
            for t, g, c in (("tcp-cubic", 80.0, 0.2), ("mac-gmac128", 50.0, 0.15), third)]


def test_what_the_mac_alone_leaves_of_the_targets():
    # TCP at 80 Gbit/s and 0.2 CPU s/GB on 2 cores: 0.2 * 10 GB/s = 2 cores, 100 % busy. The MAC
    # alone at 0.15 s/GB is 0.75x TCP's CPU per byte, leaving 0.25x under TCP's and 0.75x under
    # the 1.5x target; ltp+auth=false at 0.3 s/GB is 1.5x.
    rows = _steady(("ltp+auth=false", 60.0, 0.3))
    with stats.tally():
        text = "\n".join(loopback.mac_cost(pd.DataFrame(rows)))
    assert "kept about 100 % [100, 100] of the machine's 2 cores busy" in text
    assert "`mac-gmac128`: 0.75x" in text
    assert ("leaves the rest of the path 0.25x under a CPU per byte equal to TCP's and 0.75x "
            "under the 1.5x target") in text
    assert "`ltp+auth=false` (the rest of the path, no MAC): 1.50x" in text
    assert loopback.mac_cost(pd.DataFrame(rows[:1])) == []   # no MAC run: nothing said
    dear = pd.DataFrame(rows).replace({"cpu_s_per_gb": {0.15: 0.25}})   # the MAC alone 1.25x
    with stats.tally():
        text = "\n".join(loopback.mac_cost(dear))
    assert ("leaves the rest of the path nothing under a CPU per byte equal to TCP's and "
            "0.25x under") in text


def test_the_udp_floor_with_the_mac_bounds_an_authenticated_transport():
    # The floor at 0.9x TCP's CPU per byte and the MAC at 0.75x: an authenticated transport over
    # UDP pays at least 1.65x, above 1x (the goodput target is out of reach where TCP keeps the
    # cores busy) and above the 1.5x target. Without a floor run, nothing is said.
    rows = _steady(("udp-floor", 70.0, 0.18))
    with stats.tally():
        text = " ".join(loopback.floor(pd.DataFrame(rows)))
    assert "0.90x [0.90, 0.90] `tcp-cubic`'s CPU per byte and 0.88x" in text
    assert "at least 1.65x TCP's CPU per byte" in text and "cannot reach TCP's" in text
    assert "above the 1.5x CPU target" in text
    assert loopback.floor(pd.DataFrame([r for r in rows if r["transport"] != "udp-floor"])) == []
