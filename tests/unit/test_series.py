"""bench-series' pieces that need no testbed (harness/bench/series.py): the long form of the
samples, each push's time from the bytes acknowledged, the timeouts counted from the congestion
state, TCP_INFO read on a real loopback connection, and bad arguments refused in one sentence.
The qdisc reader and the whole benchmark run in tests/emulation/test_series.py."""

import socket

import pandas as pd
import pytest

from harness.bench import series
from harness.bench.run import BenchError


def _sender(acked, ca=None, dt=0.001):
    n = len(acked)
    return pd.DataFrame({"time_s": [i * dt for i in range(n)], "cwnd": [10] * n,
                         "srtt_ms": [1.0] * n, "ca_state": ca or [0] * n, "retrans": [0] * n,
                         "unacked": [0] * n, "bytes_acked": acked})


def _queue(n=3):
    return pd.DataFrame({"time_s": [i * 0.001 for i in range(n)], "queue_pkts": [0, 5, 2][:n],
                         "queue_bytes": [0, 7500, 3000][:n], "queue_drops": [0, 0, 1][:n]})


def test_the_long_form_holds_every_metric_of_every_source():
    out = series.long_form(_queue(), {"w1": _sender([0, 100, 200])})
    assert list(out.columns) == ["time_s", "source", "metric", "value"]
    assert set(out.metric) <= set(series.METRICS)
    assert len(out) == 3 * 3 + 3 * 6                  # 3 queue and 6 sender metrics, 3 instants
    assert out.time_s.is_monotonic_increasing


def test_a_push_ends_when_its_last_sender_is_acknowledged():
    # two pushes of 100 bytes, 0.004 s apart; w2 is slower in the first one
    s = series.long_form(_queue(), {"w1": _sender([0, 100, 100, 100, 150, 200]),
                                    "w2": _sender([0, 50, 100, 100, 200, 200])})
    first, second = series.push_times(s, 2, 0.004, 100)
    assert first == pytest.approx(0.002) and second == pytest.approx(0.004 - 0.004 + 0.001)
    never = series.long_form(_queue(), {"w1": _sender([0, 50, 60])})
    assert pd.isna(series.push_times(never, 1, 0.5, 100)[0])


def test_each_entry_into_the_loss_state_is_one_timeout():
    s = series.long_form(_queue(), {"w1": _sender([0] * 6, ca=[0, 4, 4, 0, 4, 0]),
                                    "w2": _sender([0] * 6)})
    assert series.timeouts(s) == {"w1": 2, "w2": 0}
    starts_lost = series.long_form(_queue(), {"w1": _sender([0] * 2, ca=[4, 0])})
    assert series.timeouts(starts_lost) == {"w1": 1}


def test_tcp_info_of_a_real_connection():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        client.sendall(b"x" * 100_000)
        peer.recv(1 << 20)
        cwnd, srtt_ms, ca, retrans, unacked, acked = series.tcp_state(client)
        client.close()
        peer.close()
    assert cwnd >= 1 and srtt_ms >= 0 and ca == 0 and retrans == 0 and 0 <= unacked <= cwnd
    assert 0 < acked <= 100_001                        # the SYN may count one


@pytest.mark.parametrize("change, message", [
    ({"scheme": "ltp"}, "must be a TCP scheme"),
    ({"pushes": 0}, "--pushes must be from 1"),
    ({"interval_ms": 0.1}, "--interval must be from 0.5"),
    ({"queue_pkts": 0}, "queue"),
])
def test_bad_arguments_are_refused_in_one_sentence(change, message):
    args = dict(scheme="tcp-cubic", workers=8, bandwidth_mbps=100.0, queue_pkts=64, loss_pct=0.0,
                pushes=10, period_s=0.5, n_bytes=437_544, interval_ms=1.0) | change
    with pytest.raises(Exception, match=message) as err:
        series.series_args(**args)
    assert isinstance(err.value, (BenchError, ValueError))
