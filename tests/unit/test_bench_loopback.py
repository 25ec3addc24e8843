"""The loopback benchmark's repetitions and summary (``harness.bench.loopback``): schemes
interleaved with their order rotated, spreads over repetitions, ratios paired by repetition, and
the ``--repeats`` argument checked. No transport runs here: pushes are stand-ins."""

import pytest

from harness.bench import kind, loopback
from harness.bench.loopback import LoopbackPushes, Spread, summary
from harness.running import engine, provenance
from harness.running.results import read_table


def _run(scheme: str, repeat: int, push_s: float, cpu_s: float,
         n_bytes: int = 10**9) -> LoopbackPushes:
    return LoopbackPushes(scheme, n_bytes, (push_s,) * 3, (cpu_s,) * 3, repeat)


def test_repetitions_interleave_schemes_in_rotated_order():
    got = [(r.repeat, r.scheme, r.n_bytes) for r in kind.plan(["a", "b", "c"], [100], 2, 4).specs()]
    assert got == [(0, "a", 100), (0, "b", 100), (0, "c", 100), (1, "b", 100), (1, "c", 100),
                   (1, "a", 100), (2, "c", 100), (2, "a", 100), (2, "b", 100), (3, "a", 100),
                   (3, "b", 100), (3, "c", 100)]
    assert len({r.run_id for r in kind.plan(["a", "b"], [100, 200], 2, 3).specs()}) == 12


def test_a_port_taken_before_the_bind_is_retried(monkeypatch):
    import errno

    tries = []

    def fake(scheme, n_bytes, pushes, repeat=0):
        tries.append(scheme)
        if len(tries) == 1:
            raise OSError(errno.EADDRINUSE, "Address already in use")
        return _run(scheme, repeat, 1.0, 1.0, n_bytes)

    monkeypatch.setattr(loopback, "loopback_push", fake)
    got = kind._push(kind.LoopbackRun("tcp-cubic", 100, 0, 3))
    assert got.scheme == "tcp-cubic" and len(tries) == 2


def test_the_sweep_loop_keeps_runs_resumes_and_reads_them_back(monkeypatch, tmp_path):
    # A folder of loopback runs through the engine: rows per push and per run, a crash kept as a
    # row (the sweep goes on), a second call runs nothing, and from_tables gives the ok runs back.
    calls = []

    def fake(scheme, n_bytes, pushes, repeat=0):
        calls.append((scheme, repeat))
        if scheme == "b" and repeat == 1:
            raise RuntimeError("the PS never answered")
        return LoopbackPushes(scheme, n_bytes, (0.5,) * pushes, (0.25,) * pushes, repeat)

    monkeypatch.setattr(loopback, "loopback_push", fake)
    plan = kind.plan(["a", "b"], [1000], 3, 2)
    engine.run_plan(plan, tmp_path, progress=lambda line: None, figures=False)
    engine.run_plan(plan, tmp_path, progress=lambda line: None, figures=False)
    assert len(calls) == 4
    runs = read_table(tmp_path / "runs.csv")
    assert sorted(runs.status) == ["crash", "ok", "ok", "ok"]
    assert "never answered" in runs[runs.status == "crash"].reason.iloc[0]
    assert runs.code_fingerprint.str.len().min() > 0
    assert len(read_table(tmp_path / "loopback.csv")) == 9
    back = loopback.from_tables(tmp_path)
    assert [(r.scheme, r.repeat, r.push_s) for r in back] == [
        ("a", 0, (0.5,) * 3), ("b", 0, (0.5,) * 3), ("a", 1, (0.5,) * 3)]
    assert back[0].goodput_gbps == pytest.approx(1000 * 8 / 0.5 / 1e9)
    assert provenance.folder_kind(tmp_path) == "loopback"


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


def test_the_mac_alone_is_timed_through_the_core_library():
    # The core's own MAC functions over a small message: both passes' time, a positive rate, and
    # the kind of run sends a mac- scheme to it rather than to a transport.
    got = loopback.mac_push("mac-gmac128", 262_144, 3, repeat=2)
    assert (got.scheme, got.n_bytes, got.repeat, len(got.push_s)) == ("mac-gmac128", 262_144, 2, 3)
    assert all(t > 0 for t in got.push_s) and got.goodput_gbps > 0
    assert kind._push(kind.LoopbackRun("mac-siphash24", 65_536, 0, 2)).scheme == "mac-siphash24"
    with pytest.raises(ValueError, match="the MAC must be one of mac-gmac128, mac-siphash24"):
        loopback.mac_push("mac-md5", 1024, 1)


def test_a_mac_scheme_is_loopback_only_and_one_of_the_cores():
    from harness.bench import run

    with pytest.raises(run.BenchError, match="times the MAC alone, on loopback only"):
        run.transport_args(("mac-gmac128",), (0.0,), (100.0,), 20, 64, False, 3)
    with pytest.raises(run.BenchError, match="mac-md5 is no MAC of the core"):
        run.transport_args(("mac-md5",), (0.0,), (100.0,), 20, 64, True, 3)
    assert run.transport_args(("ltp", "mac-gmac128"), (0.0,), (100.0,), 20, 64, True, 3)[0] == (
        "ltp", "mac-gmac128")


def test_the_udp_floor_is_a_real_program_and_loopback_only():
    # The kernel's part of a UDP path: the C program's pushes (built on demand), each with a
    # time and a CPU time, through the kind of run; a bad size is its usage line; and the
    # scheme is refused off loopback.
    from harness.bench import run

    got = kind._push(kind.LoopbackRun("udp-floor", 262_144, 1, 3))
    assert (got.scheme, got.n_bytes, got.repeat, len(got.push_s)) == ("udp-floor", 262_144, 1, 3)
    assert all(t > 0 for t in got.push_s) and all(c >= 0 for c in got.cpu_s)
    with pytest.raises(RuntimeError, match="usage: bench_udp_floor BYTES PUSHES"):
        loopback.floor_push("udp-floor", 0, 1)
    with pytest.raises(run.BenchError, match="times the kernel's UDP path alone, on loopback"):
        run.transport_args(("udp-floor",), (0.0,), (100.0,), 20, 64, False, 3)
    assert run.transport_args(("udp-floor", "tcp-cubic"), (0.0,), (100.0,), 20, 64, True,
                              3)[0] == ("udp-floor", "tcp-cubic")
