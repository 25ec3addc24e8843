"""Peer-to-peer mode without a network: specs, the mixing rule, the round coordinator (with a
fake controller), the report from a synthetic table."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from harness.p2p import report
from harness.p2p.coord import Coordinator, CoordinatorClient
from harness.p2p.peer import mix
from harness.p2p.run import link_bytes
from harness.p2p.spec import PRESETS, PeerSpec, PeerSpecError
from harness.running import results
from harness.running.results import P2P_COLUMNS, P2P_CURVE_COLUMNS


@pytest.mark.parametrize("fields, words", [
    ({"scheme": "tcp"}, "copy unicast"),
    ({"p": 8}, "from 1 to 7"),
    ({"sync": "async"}, "bsp or ssp"),
    ({"policy": "nearest"}, "unknown policy"),
    ({"copy": "both"}, "copy must be"),
    ({"scheme": "quic"}, "unknown peer transport"),
    ({"n_slow": 9}, "n_slow"),
])
def test_bad_specs_say_one_sentence(fields, words):
    with pytest.raises(PeerSpecError, match=words):
        PeerSpec(**fields)


def test_preset_runs_are_distinct_and_round_trip():
    specs = PRESETS["p2p"].specs()
    assert len({s.run_id for s in specs}) == len(specs) == 36
    assert all(PeerSpec.from_json(s.to_json()) == s for s in specs)
    smaller = PRESETS["p2p"].override(seeds=[0], rounds=5)
    assert {s.rounds for s in smaller.specs()} == {5} and len(smaller.specs()) == 12


def _msg(sender, round_, values, mask=None):
    frac = 1.0 if mask is None else float(np.mean(mask))
    return SimpleNamespace(sender=sender, round=round_, values=np.asarray(values, np.float32),
                           mask=None if mask is None else np.asarray(mask), received_frac=frac)


def test_mix_averages_per_coordinate_over_what_arrived():
    own = np.array([0.0, 0.0, 0.0, 0.0], np.float32)
    full = _msg(1, 3, [4, 4, 4, 4])
    part = _msg(2, 3, [8, 0, 8, 0], mask=[True, False, True, False])
    out, n, frac = mix(own, [full, part])
    assert n == 2 and frac == pytest.approx(0.75)
    assert out.tolist() == [4.0, 2.0, 4.0, 2.0]   # (0+4+8)/3 where both came, (0+4)/2 elsewhere


def test_mix_takes_the_newest_message_of_a_sender_and_nothing_is_own():
    own = np.ones(2, np.float32)
    out, n, _ = mix(own, [_msg(1, 5, [3, 3]), _msg(1, 4, [100, 100])])
    assert n == 1 and out.tolist() == [2.0, 2.0]
    same, n, frac = mix(own, [])
    assert same is own and n == 0 and frac is None


class FakeMcast:
    """Answers ``round`` like the controller: receivers are the next p ranks."""

    def __init__(self, n: int, p: int) -> None:
        self.n, self.p, self.calls = n, p, []

    def reset(self):
        self.calls.append("reset")

    def round(self, round_, senders, p, policy, *, seed, size_bytes, install):
        self.calls.append((round_, list(senders), install))
        sel = []
        for name in senders:
            s = int(name[1:]) - 1
            recv = [f"w{(s + k) % self.n + 1}" for k in range(1, p + 1)]
            sel.append({"receivers": recv, "pace_mbps": 10.0 * s + (0 if install else 1),
                        "estimate_s": 0.1, "random_p_estimate_s": 0.2, "forced": []})
        return {"selections": sel, "select_s": 0.0, "install_s": 0.0, "settle_s": 0.0}

    def command(self, op):
        """``groups``: one group on one switch, as the controller describes what it installed."""
        assert op == "groups"
        return {"groups": [{"switch": 1, "sender": "w1", "group": "239.1.0.1", "group_id": 1,
                            "buckets": [{"port": 2, "toward": "w2"}], "packets": 0}]}


def _peers(spec, tmp_path, lag=None):
    """Run every peer's sync loop in a thread; return {rank: [(round, reply, t)]}."""
    fake = FakeMcast(spec.n_workers, spec.p)
    ips = [f"10.0.0.{r + 1}" for r in range(spec.n_workers)]
    seen = {r: [] for r in range(spec.n_workers)}
    with Coordinator(spec, fake, tmp_path / "c.sock", tmp_path / "rounds.jsonl", ips):
        def peer(rank):
            client = CoordinatorClient(tmp_path / "c.sock", 10)
            for t in range(spec.rounds + 1):
                reply = client.sync(rank, t)
                seen[rank].append((t, reply, time.monotonic()))
                if reply["stop"]:
                    break
                if lag and rank in lag:
                    time.sleep(lag[rank])
            client.close()
        threads = [threading.Thread(target=peer, args=(r,)) for r in range(spec.n_workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(20)
    return seen, fake


def test_bsp_plans_each_round_once_for_everyone_in_rotating_order(tmp_path):
    spec = PeerSpec(n_leaves=2, workers_per_leaf=2, n_slow=0, rounds=3, p=2)
    seen, fake = _peers(spec, tmp_path)
    assert fake.calls[0] == "reset"
    rounds = fake.calls[1:]
    assert [c[0] for c in rounds] == [0, 1, 2]
    assert [c[1][0] for c in rounds] == ["w1", "w2", "w3"]     # the turn rotates
    assert all(c[2] for c in rounds)                            # switch copies: installed
    for rank, replies in seen.items():
        assert [t for t, _, _ in replies] == [0, 1, 2, 3] and replies[-1][1]["stop"]
        t, reply, _ = replies[0]
        assert reply["receivers"] == sorted([(rank + 1) % 4, (rank + 2) % 4])
        assert reply["group"] == f"239.1.0.{rank + 1}"
        assert reply["rate_mbps"] == pytest.approx(max(10.0 * rank, 1.0))  # the floor: 1
    assert len((tmp_path / "rounds.jsonl").read_text().splitlines()) == 3
    groups = [json.loads(line) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert [g["round"] for g in groups] == [0, 1, 2]
    assert groups[0]["groups"][0]["buckets"] == [{"port": 2, "toward": "w2"}]


def test_unicast_copies_install_nothing(tmp_path):
    spec = PeerSpec(n_leaves=2, workers_per_leaf=2, n_slow=0, rounds=1, p=2, copy="unicast")
    seen, fake = _peers(spec, tmp_path)
    assert not any(c[2] for c in fake.calls[1:])
    reply = seen[1][0][1]
    assert reply["group"] is None and reply["rate_mbps"] == pytest.approx(11.0)


def test_ssp_lets_a_peer_run_ahead_by_the_bound_and_no_further(tmp_path):
    spec = PeerSpec(n_leaves=2, workers_per_leaf=2, n_slow=0, rounds=6, p=1, sync="ssp:2")
    seen, _ = _peers(spec, tmp_path, lag={3: 0.15})
    slow_starts = {t: at for t, _, at in seen[3]}
    for rank in (0, 1, 2):
        for t, reply, at in seen[rank]:
            if reply["stop"]:
                assert at >= slow_starts[spec.rounds] - 0.05   # the final barrier waits for all
                continue
            # round t may start only once the slow peer has asked for round t - 2
            if t - 2 >= 0:
                assert at >= slow_starts[t - 2] - 0.01


def test_link_bytes_counts_trunks_both_ways_and_host_ports():
    def ports(uplink, host, spine):
        return {"l1": {1: {"tx_bytes": uplink}, 2: {"tx_bytes": host}},
                "l2": {1: {"tx_bytes": uplink}, 2: {"tx_bytes": host}},
                "sp1": {1: {"tx_bytes": spine}, 2: {"tx_bytes": spine}}}
    trunk, access = link_bytes(ports(0, 0, 0), ports(10, 7, 5), 2)
    assert trunk == 10 + 10 + 5 + 5 and access == 14


def _row(method_fields, seed, sync_s, avg_p, acc):
    row = {c.name: None for c in P2P_COLUMNS}
    row.update(run_id=f"r{method_fields['policy']}{seed}", sweep="t", status="ok", reason="",
               method=f"{method_fields['policy']}/switch/mcast", copy="switch", scheme="mcast",
               sync="bsp", p=2, n_workers=8, n_slow=2, access_mbps=100.0, slow_frac=0.25,
               uplink_mbps=100.0, loss_pct=0.0, seed=seed, rounds=10, rounds_done=10,
               sync_s=sync_s, round_s=sync_s + 0.01, avg_p=avg_p, delivered_p=avg_p,
               trunk_bytes_per_round=2e6, final_accuracy=acc, peer_acc_min=acc - 0.01,
               peer_acc_max=acc + 0.01, tta_s=None, target_accuracy=0.8, git_commit="abc1234",
               **method_fields)
    return row


def test_report_names_a_winner_only_where_intervals_separate(tmp_path):
    rows = [_row({"policy": "random-p"}, s, 0.30 + 0.01 * s, 2.0, 0.70) for s in range(3)]
    rows += [_row({"policy": "selmcast"}, s, 0.10 + 0.01 * s, 5.0, 0.70 + 0.001 * s)
             for s in range(3)]
    results.append_rows(tmp_path / "runs.csv", P2P_COLUMNS, rows)
    results.append_rows(tmp_path / "curves.csv", P2P_CURVE_COLUMNS,
                        [{"run_id": r["run_id"], "round": k, "t_s": k * 1.0, "acc_mean": 0.1 * k,
                          "acc_min": 0.1 * k, "acc_max": 0.1 * k} for r in rows for k in range(3)])
    assert report.is_p2p(tmp_path)
    text = report.write(tmp_path).read_text()
    assert "selmcast/switch/mcast" in text
    sync_line = next(line for line in text.splitlines() if line.startswith("- sync s/round"))
    assert "selmcast/switch/mcast/bsp is better" in sync_line
    acc_line = next(line for line in text.splitlines() if line.startswith("- accuracy"))
    assert "within noise" in acc_line
    assert (tmp_path / "figures" / "p2p_sync.png").exists()
    assert (tmp_path / "figures" / "p2p_accuracy.png").exists()
