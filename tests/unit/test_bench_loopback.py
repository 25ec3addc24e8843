"""The loopback benchmark's repetitions and summary (``harness.bench.loopback``): schemes
interleaved with their order rotated, spreads over repetitions, ratios paired by repetition, and
the ``--repeats`` argument checked. No transport runs here: pushes are stand-ins."""

import pytest

from harness.bench import loopback
from harness.bench.loopback import LoopbackPushes, Spread, summary


def _run(scheme: str, repeat: int, push_s: float, cpu_s: float,
         n_bytes: int = 10**9) -> LoopbackPushes:
    return LoopbackPushes(scheme, n_bytes, (push_s,) * 3, (cpu_s,) * 3, repeat)


def test_repetitions_interleave_schemes_in_rotated_order(monkeypatch):
    calls = []

    def fake(scheme, n_bytes, pushes, repeat=0):
        calls.append((repeat, scheme))
        return _run(scheme, repeat, 1.0, 1.0, n_bytes)

    monkeypatch.setattr(loopback, "loopback_push", fake)
    runs = loopback.repeated(["a", "b", "c"], 100, 2, 4)
    assert calls == [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"),
                     (2, "c"), (2, "a"), (2, "b"), (3, "a"), (3, "b"), (3, "c")]
    assert [r.repeat for r in runs] == [r for r, _ in calls]


def test_a_port_taken_before_the_bind_is_retried(monkeypatch):
    import errno

    tries = []

    def fake(scheme, n_bytes, pushes, repeat=0):
        tries.append(scheme)
        if len(tries) == 1:
            raise OSError(errno.EADDRINUSE, "Address already in use")
        return _run(scheme, repeat, 1.0, 1.0, n_bytes)

    monkeypatch.setattr(loopback, "loopback_push", fake)
    assert len(loopback.repeated(["tcp-cubic"], 100, 2, 1)) == 1 and len(tries) == 2


def test_summary_spreads_and_ratios_paired_by_repetition():
    # 1 GB pushes: goodput 8 / push_s Gbit/s, CPU per GB = cpu_s.
    runs = [_run("ltp", 0, 1.0, 2.0), _run("tcp-cubic", 0, 2.0, 1.0),
            _run("ltp", 1, 4.0, 3.0), _run("tcp-cubic", 1, 2.0, 2.0),
            _run("ltp", 2, 2.0, 4.0), _run("tcp-cubic", 2, 1.0, 1.0)]
    ltp, tcp = summary(runs, "tcp-cubic")
    assert (ltp.scheme, ltp.repeats, tcp.scheme) == ("ltp", 3, "tcp-cubic")
    assert ltp.goodput_gbps == Spread(4.0, 2.0, 8.0)
    assert ltp.cpu_s_per_gb == Spread(3.0, 2.0, 4.0)
    # per repetition: goodput 2, 0.5, 0.5 x TCP's; CPU 2, 1.5, 4 x TCP's
    assert ltp.goodput_ratio == Spread(0.5, 0.5, 2.0)
    assert ltp.cpu_ratio == Spread(2.0, 1.5, 4.0)
    assert tcp.goodput_ratio is None and tcp.cpu_ratio is None


def test_summary_without_reference_or_with_unpaired_sizes():
    runs = [_run("ltp", 0, 1.0, 1.0), _run("tcp-cubic", 0, 1.0, 1.0, n_bytes=2 * 10**9)]
    assert all(s.goodput_ratio is None for s in summary(runs, None))
    ltp = summary(runs, "tcp-cubic")[0]
    assert ltp.n_bytes == 10**9 and ltp.cpu_ratio is None   # no TCP run of that size


def test_repeats_out_of_range_is_one_sentence():
    from harness.bench import run

    with pytest.raises(run.BenchError, match="--repeats must be from 1 to 100"):
        run.transport_args(("ltp",), (0.0,), (100.0,), 20, 64, True, 0)
    args = run.transport_args(("ltp",), (0.0,), (100.0,), 20, 64, True, 3)
    assert args[2] == () and args[-1] == 3
