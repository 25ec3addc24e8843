"""MLT without a network: how parts are ranked and marked, the bottleneck's tc command lines, the
queue switching between runs, and one-sentence errors for bad options.

Run with ``.venv/bin/pytest tests/unit/test_mlt.py``; no root, no sockets (the marks on the wire
are checked over loopback by ``tests/conformance/test_mlt_marks.py``).
"""

import json
import types

import numpy as np
import pytest

from topologies.testbed import bottleneck
from topologies.testbed.counters import QueueCounters, parse_qdisc
from transports import registry
from transports.base import Layout, OptionError, PriorityBands
from transports.mlt import (assign_levels, level_dscp, part_scores, part_tos, split_parts)

LAYOUT = Layout.from_sizes([("0.weight", 1000), ("0.bias", 10), ("2.weight", 300),
                            ("empty", 0), ("2.bias", 5)])


def _needs_core():
    from transports import native
    try:
        native.rank_server()
    except Exception as exc:   # the unit tests run without the native build too
        pytest.skip(str(exc))


# ---- parts and their importance ----------------------------------------------------------------

def test_parts_are_tensors_or_pieces_and_skip_empty_tensors():
    assert split_parts(LAYOUT, 0) == [(0, 0, 1000), (1, 1000, 10), (2, 1010, 300), (4, 1310, 5)]
    pieces = split_parts(LAYOUT, 400)
    assert pieces[:3] == [(0, 0, 400), (0, 400, 400), (0, 800, 200)]
    assert sum(n for _, _, n in pieces) == LAYOUT.n_floats
    assert all(n <= 400 for _, _, n in pieces)


def test_magnitude_is_the_mean_absolute_value_and_ignores_what_is_not_finite():
    parts = [(0, 0, 4), (1, 4, 2)]
    flat = np.array([1, -3, 0, 4, np.nan, -2], dtype=np.float32)
    np.testing.assert_allclose(part_scores(flat, parts, "magnitude"), [2.0, 1.0])


def test_layer_rules_rank_by_position():
    parts = split_parts(LAYOUT, 400)
    back = part_scores(np.zeros(LAYOUT.n_floats, np.float32), parts, "back-layers")
    assert list(back) == sorted(back) and back[-1] == 4   # the last tensor ranks highest
    front = part_scores(np.zeros(LAYOUT.n_floats, np.float32), parts, "front-layers")
    np.testing.assert_array_equal(front, -back)


def test_two_levels_put_the_more_important_half_on_top_by_the_parts_middles():
    # sizes 10, 80, 10; scores rank them c, a, b: c covers [0, .1), a [.1, .2), b [.2, 1)
    levels = assign_levels(np.array([2.0, 1.0, 3.0]), [10, 80, 10], 2, 0.5)
    assert list(levels) == [0, 1, 0]   # b's middle (0.6) is past one half
    assert list(assign_levels(np.array([2.0, 1.0, 3.0]), [10, 80, 10], 2, 0.7)) == [0, 0, 0]


def test_more_levels_split_the_rest_evenly_and_ties_keep_layout_order():
    sizes = [10] * 10
    levels = assign_levels(np.arange(10, 0, -1, dtype=float), sizes, 3, 0.2)
    assert list(levels) == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    tied = assign_levels(np.zeros(4), [1, 1, 1, 1], 2, 0.5)
    assert list(tied) == [0, 0, 1, 1]
    assert list(assign_levels(np.ones(3), [1, 1, 1], 2, 0.0)) == [1, 1, 1]
    assert list(assign_levels(np.ones(3), [1, 1, 1], 4, 1.0)) == [0, 0, 0]
    assert list(assign_levels(np.ones(3), [1, 1, 1], 1, 0.5)) == [0, 0, 0]


def test_levels_are_class_selectors_top_first_and_marks_carry_them_in_the_tos_byte():
    assert [level_dscp(k, 3) for k in range(3)] == [16, 8, 0]
    assert level_dscp(0, 8) == 56 and level_dscp(1, 2) == 0
    assert part_tos(np.array([1, 0, 2]), 3) == [0x20, 0x40, 0x00]


def test_a_mark_is_the_cores_flag_with_the_byte():
    _needs_core()
    from transports import native
    flag = int(native._core()[1].LTP_TOS_MARK)
    assert flag > 0xFF and native.tos_mark(0x40) == flag | 0x40 and native.tos_mark(0) == flag
    with pytest.raises(ValueError, match="0 to 255"):
        native.tos_mark(256)


# ---- the scheme --------------------------------------------------------------------------------

def test_defaults_bound_and_queue():
    _needs_core()
    t = registry.create("mlt")
    o = t.options()
    assert (o["loss_bound"], o["filler"], o["levels"]) == (0.10, "zero", 2)
    assert "threshold_min" not in o and "max_open_per_peer" not in o
    assert t.receive_thresholds() == (0.9, 0.9)
    assert t.bottleneck_queue() == PriorityBands((8, 0), (1.0, 1.0), head_drop=True)
    q = registry.create("mlt", {"levels": 3, "buffer_shares": [2, 1, 1],
                                "band_drop": "tail"}).bottleneck_queue()
    assert q == PriorityBands((16, 8, 0), (2.0, 1.0, 1.0), head_drop=False)
    assert registry.create("mlt", {"levels": 1}).bottleneck_queue() is None


def test_every_other_scheme_keeps_the_plain_fifo():
    _needs_core()
    others = [s for s in registry.slugs() if s != "mlt"]
    assert others and all(registry.create(s).bottleneck_queue() is None for s in others)


@pytest.mark.parametrize("options, words", [
    ({"levels": 0}, "levels"),
    ({"levels": 9}, "levels"),
    ({"high_frac": 1.5}, "high_frac"),
    ({"loss_bound": -0.1}, "loss_bound"),
    ({"importance": "gradient"}, "importance"),
    ({"band_drop": "middle"}, "band_drop"),
    ({"part_floats": -1}, "part_floats"),
    ({"buffer_shares": [1, 2, 3]}, "buffer_shares"),
    ({"buffer_shares": [1, 0]}, "buffer_shares"),
    ({"buffer_shares": "1,1"}, "buffer_shares"),
    ({"threshold_max": 0.9}, "no option 'threshold_max'"),
])
def test_bad_options_are_refused_in_one_sentence(options, words):
    _needs_core()
    with pytest.raises(OptionError, match=words) as info:
        registry.create("mlt", options)
    message = str(info.value)
    assert message.endswith(".") and message.count(". ") == 0


def test_too_many_parts_are_refused_in_one_sentence():
    _needs_core()
    t = registry.create("mlt", {"part_floats": 1})
    with pytest.raises(OptionError, match="raise it") as info:
        t.serve(("127.0.0.1", 9), [("127.0.0.1", 10)], LAYOUT)
    assert str(info.value).count(". ") == 0
    with pytest.raises(OptionError, match="collectives"):
        t.mesh(0, [("127.0.0.1", 9)], [])


# ---- the bottleneck's tc command lines ---------------------------------------------------------

def test_the_fifo_is_todays_command():
    assert bottleneck.fifo_commands("s1-eth1", 64) == [
        ["tc", "qdisc", "add", "dev", "s1-eth1", "parent", "5:1", "handle", "10:", "pfifo",
         "limit", "64"]]
    assert bottleneck.clear_commands("s1-eth1") == [
        ["tc", "qdisc", "del", "dev", "s1-eth1", "parent", "5:1", "handle", "10:"]]


def test_band_limits_share_the_buffer_exactly():
    assert bottleneck.band_limits(64, (1.0, 1.0)) == [32, 32]
    assert bottleneck.band_limits(64, (1.0, 1.0, 1.0)) == [22, 21, 21]
    assert bottleneck.band_limits(10, (8.0, 1.0, 1.0)) == [8, 1, 1]
    assert bottleneck.band_limits(3, (100.0, 1.0, 1.0)) == [1, 1, 1]
    assert sum(bottleneck.band_limits(17, (3.0, 2.0, 2.0, 1.0))) == 17


def test_priority_bands_are_htb_classes_in_prio_order_fed_by_dscp_filters():
    bands = PriorityBands((16, 8, 0), (2.0, 1.0, 1.0))
    cmds = bottleneck.priority_commands("s1-eth1", 100.0, 64, bands)
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "s1-eth1", "parent", "5:1", "handle", "10:",
                       "htb", "default", "13"]
    classes = [c for c in cmds if c[1] == "class"]
    assert [c[c.index("classid") + 1] for c in classes] == ["10:11", "10:12", "10:13"]
    assert [c[c.index("prio") + 1] for c in classes] == ["0", "1", "2"]
    assert all(c[c.index("rate") + 1] == c[c.index("ceil") + 1] == "1000mbit" for c in classes)
    fifos = [c for c in cmds if c[1] == "qdisc" and c[8] != "10:"]
    assert [(c[6], c[8], c[9], int(c[11])) for c in fifos] == [
        ("10:11", "11:", "pfifo_head_drop", 32), ("10:12", "12:", "pfifo_head_drop", 16),
        ("10:13", "13:", "pfifo_head_drop", 16)]
    filters = [c for c in cmds if c[1] == "filter"]
    assert [(f[f.index("dsfield") + 1], f[f.index("dsfield") + 2], f[-1]) for f in filters] == [
        ("0x40", "0xfc", "10:11"), ("0x20", "0xfc", "10:12"), ("0x00", "0xfc", "10:13")]
    assert all(f[f.index("parent") + 1] == "10:" and "ip" in f for f in filters)
    tail = bottleneck.priority_commands("s1-eth1", 100.0, 64, PriorityBands((8, 0), (1, 1),
                                                                            head_drop=False))
    assert {c[9] for c in tail if c[1] == "qdisc" and c[8] != "10:"} == {"pfifo"}


@pytest.mark.parametrize("bands, queue_pkts, words", [
    (PriorityBands(tuple(range(9)), (1.0,) * 9), 64, "from 1 to 8 bands"),
    (PriorityBands((8, 0), (1.0,)), 64, "one buffer share per band"),
    (PriorityBands((8, 8), (1.0, 1.0)), 64, "distinct"),
    (PriorityBands((64, 0), (1.0, 1.0)), 64, "from 0 to 63"),
    (PriorityBands((8, 0), (1.0, 0.0)), 64, "above 0"),
    (PriorityBands((16, 8, 0), (1.0, 1.0, 1.0)), 2, "queue_pkts"),
])
def test_impossible_bands_are_refused_in_one_sentence(bands, queue_pkts, words):
    with pytest.raises(bottleneck.QueueError, match=words) as info:
        bottleneck.priority_commands("s1-eth1", 100.0, queue_pkts, bands)
    assert str(info.value).count(". ") == 0


def test_counters_read_the_queue_by_its_handle_and_the_bands_by_their_parents():
    shown = json.dumps([
        {"kind": "htb", "handle": "5:", "root": True, "bytes": 10, "packets": 1, "drops": 0},
        {"kind": "htb", "handle": "10:", "parent": "5:1", "bytes": 9000, "packets": 9,
         "drops": 5, "overlimits": 0, "requeues": 0},
        {"kind": "pfifo_head_drop", "handle": "11:", "parent": "10:11", "bytes": 6000,
         "packets": 6, "drops": 0},
        {"kind": "pfifo_head_drop", "handle": "12:", "parent": "10:12", "bytes": 3000,
         "packets": 3, "drops": 5},
    ])
    assert parse_qdisc(shown, bottleneck.HANDLE) == QueueCounters(9, 9000, 5, 0, 0)
    bands = bottleneck.parse_bands(shown)
    assert list(bands) == [0, 1]
    assert (bands[0].sent_packets, bands[0].drops) == (6, 0)
    assert (bands[1].sent_packets, bands[1].drops) == (3, 5)
    fifo = json.dumps([{"kind": "pfifo", "handle": "10:", "parent": "5:1", "bytes": 30,
                        "packets": 3, "drops": 1}])
    assert parse_qdisc(fifo, bottleneck.HANDLE).sent_packets == 3
    assert bottleneck.parse_bands(fifo) == {}


# ---- switching the queue between runs ----------------------------------------------------------

def _queue(monkeypatch, fail_on=None):
    ran = []

    def run(*argv):
        ran.append(list(argv))
        if fail_on and fail_on(argv):
            raise bottleneck.TestbedError(f"{' '.join(argv)} failed: no.")
        return ""

    monkeypatch.setattr(bottleneck, "run", run)
    params = types.SimpleNamespace(bottleneck_intf="s1-eth1", bottleneck_mbps=100.0,
                                   queue_pkts=64)
    return bottleneck.BottleneckQueue(types.SimpleNamespace(params=params)), ran


def test_the_queue_switches_only_when_a_run_asks_for_another(monkeypatch):
    queue, ran = _queue(monkeypatch)
    bands = PriorityBands((8, 0), (1.0, 1.0))
    queue.configure(None)
    assert ran == []   # the network came up with the FIFO
    queue.configure(bands)
    assert ran[0] == bottleneck.clear_commands("s1-eth1")[0]
    assert ran[1:] == bottleneck.priority_commands("s1-eth1", 100.0, 64, bands)
    ran.clear()
    queue.configure(PriorityBands((8, 0), (1.0, 1.0)))
    assert ran == []
    queue.configure(None)
    assert ran == bottleneck.clear_commands("s1-eth1") + bottleneck.fifo_commands("s1-eth1", 64)
    assert queue.applied is None


def test_a_failed_switch_is_repaired_by_the_next_run(monkeypatch):
    queue, ran = _queue(monkeypatch, fail_on=lambda argv: "filter" in argv)
    with pytest.raises(bottleneck.TestbedError):
        queue.configure(PriorityBands((8, 0), (1.0, 1.0)))
    queue, ran = _queue(monkeypatch, fail_on=lambda argv: "del" in argv)
    queue.applied = bottleneck.BottleneckQueue._UNKNOWN
    queue.configure(None)   # the del fails (nothing left to delete), the FIFO is made anyway
    assert ran[-1] == bottleneck.fifo_commands("s1-eth1", 64)[0] and queue.applied is None


def test_a_topology_without_a_ps_keeps_its_fifos_and_refuses_bands(monkeypatch):
    queue, ran = _queue(monkeypatch)
    queue.testbed.params = types.SimpleNamespace(queue_pkts=64)
    queue.configure(None)
    with pytest.raises(bottleneck.TestbedError, match="incast star"):
        queue.configure(PriorityBands((8, 0), (1.0, 1.0)))
    assert ran == []


def test_the_runner_gives_every_run_its_transports_queue():
    from harness.running.runner import apply_host_settings

    asked = []
    params = types.SimpleNamespace(worker_names=["w1"])
    testbed = types.SimpleNamespace(params=params, reset_routes=lambda: None,
                                    host_run=lambda *a: "",
                                    queue=types.SimpleNamespace(configure=asked.append))
    bands = PriorityBands((8, 0), (1.0, 1.0))
    apply_host_settings(testbed, types.SimpleNamespace(host_commands=lambda i, s: [],
                                                       bottleneck_queue=lambda: bands))
    apply_host_settings(testbed, types.SimpleNamespace(host_commands=lambda i, s: [],
                                                       bottleneck_queue=lambda: None))
    assert asked == [bands, None]
