"""Conformance tests of the LTP transport's Python binding over loopback (127.0.0.1).

A parameter server and 2-3 workers run as threads of this process (the native calls release the
GIL), each on its own UDP port. Randomness is seeded; every wait has a deadline. Needs the native
library: ``./setup.sh`` (which runs ``pip install -e .``).

    .venv/bin/pytest tests/conformance/test_ltp_core.py
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from harness.training import models
from transports import filling, native, registry
from transports.base import (SERVER, Delivery, Layout, OptionError, Session, TransportError,
                             TransportTimeout)
from tests.conformance.loopback import free_ports, on_free_ports

ltp = pytest.importorskip("transports.ltp")
try:
    ltp.library_path()
except TransportError as exc:  # pragma: no cover - depends on the build
    pytest.skip(str(exc), allow_module_level=True)

N_FLOATS = models.n_params("mlp")   # the reference model's gradient
TIMEOUT_S = 20.0


def gradient(rank: int, it: int, n: int = N_FLOATS) -> np.ndarray:
    return np.random.default_rng(1000 * it + rank).standard_normal(n).astype(np.float32)


def params(it: int, n: int = N_FLOATS) -> np.ndarray:
    return np.random.default_rng(7_000 + it).standard_normal(n).astype(np.float32)


def run_job(options: dict, layout: Layout, n_workers: int, iterations: int,
            on_server: Callable | None = None) -> dict:
    """One PS and n workers for some iterations; returns what each side received and its stats."""
    return on_free_ports(n_workers + 1, lambda ports: _run_job_on(
        ports, options, layout, n_workers, iterations, on_server))


def _run_job_on(ports: list[int], options: dict, layout: Layout, n_workers: int,
                iterations: int, on_server: Callable | None) -> dict:
    transport = registry.create("ltp", options)
    server_addr = ("127.0.0.1", ports[0])
    worker_addrs = [("127.0.0.1", p) for p in ports[1:]]
    out: dict = {"gathered": [], "pulled": {r: [] for r in range(n_workers)}, "errors": [],
                 "worker_stats": {}, "reports": {r: [] for r in range(n_workers)}}

    def worker(rank: int) -> None:
        try:
            with transport.connect(rank, worker_addrs[rank], server_addr, layout) as w:
                w.join(TIMEOUT_S)
                for it in range(iterations):
                    grad = gradient(rank, it, layout.n_floats)
                    out["reports"][rank].append(w.push(it, grad, TIMEOUT_S))
                    out["pulled"][rank].append(w.pull(it, TIMEOUT_S))
                out["worker_stats"][rank] = w.stats()
        except BaseException as exc:  # reported by the main thread's assertion
            out["errors"].append((rank, exc))

    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(n_workers)]
    with transport.serve(server_addr, worker_addrs, layout) as ps:
        for t in threads:
            t.start()
        ps.wait_for_workers(TIMEOUT_S)
        for it in range(iterations):
            deliveries = ps.gather(it, TIMEOUT_S)
            out["gathered"].append(deliveries)
            if on_server:
                on_server(ps, it, deliveries)
            ps.broadcast(it, params(it, layout.n_floats), TIMEOUT_S)
        for t in threads:
            t.join(TIMEOUT_S)
        out["server_stats"] = ps.stats()
        out["thresholds"] = [ps.threshold(r) for r in range(n_workers)]
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish"
    assert not out["errors"], out["errors"]
    return out


def test_whole_delivery_without_loss() -> None:
    layout = Layout.single(N_FLOATS)
    res = run_job({}, layout, n_workers=3, iterations=3)
    for it, deliveries in enumerate(res["gathered"]):
        assert len(deliveries) == 3
        for rank, d in enumerate(deliveries):
            assert d.values.dtype == np.float32 and d.values.shape == (N_FLOATS,)
            assert np.array_equal(d.values.view(np.uint32), gradient(rank, it).view(np.uint32))
            assert d.mask is None or d.mask.all()
            assert d.received_frac == 1.0
            assert d.segment_fracs == (1.0,)
            assert d.stats["packets"] == d.stats["count"] and d.stats["early_closed"] == 0
    for rank in range(3):
        for it, d in enumerate(res["pulled"][rank]):
            assert np.array_equal(d.values, params(it)) and d.received_frac == 1.0
        for rep in res["reports"][rank]:
            assert rep.payload_bytes == 4 * N_FLOATS and rep.wire_bytes > rep.payload_bytes
            assert rep.packets >= rep.stats["count"]
            # The send's own timing: queued, first pass, done, in that order.
            st = rep.stats
            assert 0 <= st["wait_us"] <= st["first_pass_us"] <= st["elapsed_us"]
            assert st["max_gap_us"] <= st["elapsed_us"] and st["probes"] >= 0
    stats = res["server_stats"]
    for name in ("malformed", "unknown_peer", "wrong_session", "stale"):
        assert stats[name] == 0, name
    assert stats["close_complete"] == 9


@pytest.mark.parametrize("options, datagram, counters", [
    # Loopback's MTU is 65,536: 64 KB datagrams, read straight into the receiver's buffer.
    ({}, 65_507, ("rx_placed",)),
    # Ethernet-sized datagrams go out as GSO runs and come back as GRO runs.
    ({"packet_payload_bytes": 1472}, 1472, ("tx_gso_runs", "rx_gro_runs")),
    ({"packet_payload_bytes": 1472, "udp_gso": False}, 1472, ()),
])
def test_datagram_paths_deliver_exactly(options: dict, datagram: int, counters: tuple) -> None:
    """Every way the driver moves datagrams delivers the bytes sent, 4 MB messages included."""
    n = 1 << 20
    res = run_job(options, Layout.single(n), n_workers=2, iterations=3)
    for it, deliveries in enumerate(res["gathered"]):
        for rank, d in enumerate(deliveries):
            assert np.array_equal(d.values.view(np.uint32), gradient(rank, it, n).view(np.uint32))
            assert d.received_frac == 1.0
    for rank in range(2):
        for it, d in enumerate(res["pulled"][rank]):
            assert np.array_equal(d.values, params(it, n))
    stats = res["server_stats"]
    assert stats["malformed"] == 0
    for name in counters:
        assert stats[name] > 0 or res["worker_stats"][0][name] > 0, name
    if not options.get("udp_gso", True):
        assert stats["tx_gso_runs"] == stats["rx_gro_runs"] == 0
    with native.Endpoint(registry.create("ltp", options).core_settings((0.8, 0.99)), 0,
                         ("127.0.0.1", 0)) as end:
        end.add_peer(native.rank_server(), ("127.0.0.1", free_ports(1)[0]))
        assert end.datagram_bytes == datagram
        assert end.offload["gso"] == options.get("udp_gso", True)


def test_partial_delivery_with_receive_drops() -> None:
    layout = Layout.from_sizes([("w", N_FLOATS - 1000), ("b", 1000)])
    options = {"rx_drop_frac": 0.1, "threshold_min": 0.8, "threshold_max": 0.95,
               "close_grace_min_us": 0, "grace_rtt_mult": 0.0, "filler": "zero", "seed": 3,
               "packet_payload_bytes": 1472}   # Ethernet-sized: drops of 64 KB are too coarse
    res = run_job(options, layout, n_workers=2, iterations=4)
    partial = 0
    for it, deliveries in enumerate(res["gathered"]):
        for rank, d in enumerate(deliveries):
            sent = gradient(rank, it)
            mask = np.ones(N_FLOATS, bool) if d.mask is None else d.mask
            assert mask.dtype == np.bool_ and mask.shape == (N_FLOATS,)
            assert np.array_equal(d.values[mask], sent[mask])
            assert np.all(d.values[~mask] == 0.0)             # zero filler
            assert d.received_frac == pytest.approx(mask.mean(), abs=1e-12)
            assert d.received_frac >= options["threshold_min"]
            assert d.stats["threshold_frac"] <= options["threshold_max"]
            seg = (mask[: N_FLOATS - 1000].mean(), mask[N_FLOATS - 1000:].mean())
            assert d.segment_fracs == pytest.approx(seg)
            partial += d.mask is not None
    assert partial >= 1, "no message closed early at 10% receive drops"
    assert res["server_stats"]["rx_dropped_hook"] > 0
    assert res["server_stats"]["close_early"] >= 1
    # Parameters are reliable by default even though the workers drop 10% too.
    for rank in range(2):
        for it, d in enumerate(res["pulled"][rank]):
            assert d.received_frac == 1.0 and np.array_equal(d.values, params(it))
    assert all(options["threshold_min"] <= th <= options["threshold_max"] for th in res["thresholds"])


def test_critical_segments_always_arrive() -> None:
    layout = Layout.from_sizes([("conv", 60_000), ("fc.weight", N_FLOATS - 61_000), ("fc.bias", 1000)])
    options = {"rx_drop_frac": 0.2, "threshold_min": 0.5, "threshold_max": 0.6,
               "close_grace_min_us": 0, "grace_rtt_mult": 0.0, "critical_segments": ("fc.bias",),
               "packet_payload_bytes": 1472}
    averages = []
    res = run_job(options, layout, n_workers=2, iterations=3,
                  on_server=lambda ps, it, ds: averages.append(ps.average(ds)))
    for it, deliveries in enumerate(res["gathered"]):
        for rank, d in enumerate(deliveries):
            assert d.segment_fracs[2] == 1.0
            mask = np.ones(N_FLOATS, bool) if d.mask is None else d.mask
            assert np.array_equal(d.values[mask], gradient(rank, it)[mask])
        expected = filling.masked_mean(deliveries)
        assert np.array_equal(averages[it], expected)


def _delivery(values: list[float], mask: list[bool] | None) -> Delivery:
    v = np.array(values, dtype=np.float32)
    m = None if mask is None else np.array(mask, dtype=bool)
    frac = 1.0 if m is None else float(m.mean())
    return Delivery(v, m, frac, (frac,), {})


def test_filler_zero() -> None:
    d = filling.Filler("zero").apply(0, _delivery([1, 2, 3, 4], [True, False, True, False]))
    assert d.values.tolist() == [1, 0, 3, 0]
    assert d.mask.tolist() == [True, False, True, False]   # the mask says what was filled
    assert d.stats["filled_frac"] == 0.5


def test_filler_previous_is_per_sender() -> None:
    f = filling.Filler("previous")
    f.apply(0, _delivery([1, 2, 3, 4], None))
    f.apply(1, _delivery([9, 9, 9, 9], None))
    d = f.apply(0, _delivery([5, 6, 7, 8], [False, True, False, True]))
    assert d.values.tolist() == [1, 6, 3, 8]
    d = f.apply(0, _delivery([0, 0, 0, 0], [False, False, True, True]))
    assert d.values.tolist() == [1, 6, 0, 0]                 # previous = last filled values
    first = f.apply(2, _delivery([5, 5, 5, 5], [True, False, True, False]))
    assert first.values.tolist() == [5, 0, 5, 0]             # no history: zeros


def test_filler_masked_mean() -> None:
    ds = [_delivery([1, 2, 3, 4], None),
          _delivery([3, 0, 5, 0], [True, False, True, False]),
          _delivery([5, 7, 0, 0], [True, True, False, False])]
    assert filling.masked_mean(ds).tolist() == [3, 4.5, 4, 4]
    holes = [_delivery([1, 0], [True, False]), _delivery([3, 0], [True, False])]
    assert filling.masked_mean(holes).tolist() == [2, 0]
    prev = np.array([10, 20], dtype=np.float32)
    assert filling.masked_mean(holes, empty="previous", previous_mean=prev).tolist() == [2, 20]
    rng = np.random.default_rng(5)
    vals = rng.standard_normal((4, 1000)).astype(np.float32)
    masks = rng.random((4, 1000)) < 0.8
    got = filling.masked_mean([Delivery(v, m, float(m.mean()), (), {}) for v, m in zip(vals, masks)])
    with np.errstate(invalid="ignore"):
        ref = np.nan_to_num((vals * masks).sum(0) / masks.sum(0))
    assert np.allclose(got, ref, atol=1e-6)


@pytest.mark.parametrize("options, words", [
    ({"bogus": 1}, "no option 'bogus'"),
    ({"threshold_min": 1.5}, "threshold_min"),
    ({"threshold_min": 0.9, "threshold_max": 0.8}, "must not exceed"),
    ({"filler": "mean"}, "filler"),
    ({"send_order": "backwards"}, "send_order"),
    ({"peer_schedule": "random"}, "peer_schedule"),
    ({"cwnd_ack_extra_us": -1}, "cwnd_ack_extra_us"),
    ({"cc": "yes"}, "option cc must be true or false"),
    ({"ack_every": 0}, "ack_every"),
    ({"ack_every": 2.5}, "ack_every"),
    ({"packet_payload_bytes": 20}, "packet_payload_bytes"),
    ({"rx_drop_frac": 1.0}, "rx_drop_frac"),
    ({"critical_segments": "fc"}, "critical_segments"),
    ({"max_wait_ms": "soon"}, "max_wait_ms"),
])
def test_option_errors(options: dict, words: str) -> None:
    with pytest.raises(OptionError, match=words) as info:
        registry.create("ltp", options)
    message = str(info.value)
    assert message.endswith(".") and message.count(". ") == 0   # one sentence


def test_registry_entry_and_defaults() -> None:
    info = registry.get("ltp")
    drawn = (info.display_name, info.color, info.marker, info.loss_tolerant)
    assert drawn == ("LTP", "#d62728", "D", True)
    opts = registry.create("ltp").options()
    assert opts["pull_threshold"] == 1.0 and opts["filler"] == "masked-mean"
    assert set(opts) == set(ltp.LtpTransport.DEFAULTS)


def test_unknown_critical_segment_is_rejected() -> None:
    t = registry.create("ltp", {"critical_segments": ["nope"]})
    with pytest.raises(OptionError, match="nope"):
        t.serve(("127.0.0.1", free_ports(1)[0]), [("127.0.0.1", 1)], Layout.single(8))


def test_error_mapping() -> None:
    codes = {name: code for code, name in native.error_names().items()}
    timeout = codes["LTP_ETIMEDOUT"]
    with pytest.raises(ltp.LtpTimeout) as info:
        ltp.check(timeout, "waiting")
    assert isinstance(info.value, TransportTimeout) and info.value.code == timeout
    assert str(info.value) == "waiting: the deadline passed before the peer finished."
    for name, code in codes.items():
        if code < 0:
            kind = ltp.LtpSystemError if name in ("LTP_ESYS", "LTP_ENOMEM") else ltp.LtpError
            with pytest.raises(kind) as info:
                ltp.check(code, "x")
            assert "unknown error code" not in str(info.value) and info.value.code == code
    with pytest.raises(ltp.LtpError, match="unknown error code"):
        ltp.check(-99, "x")
    assert ltp.check(5, "x") == 5


def test_option_tables_come_from_the_core() -> None:
    core = native.core_options()
    ffi, _ = native._core()
    fields = [name for name, _ in ffi.typeof("ltp_config_t").fields]
    assert list(core) == fields                  # one row per ltp_config_t field, in order
    rows = {o.name: o for o in ltp.LtpTransport.option_table()}
    assert (rows["ack_every"].low, rows["ack_every"].high) == (core["ack_every"].low,
                                                                 core["ack_every"].high)
    assert rows["send_order"].choices == core["send_order"].choices == (
        "sequential", "random", "priority")
    assert rows["max_wait_ms"].default * 1000 == core["max_wait_us"].default
    assert rows["packet_payload_bytes"].native == "max_udp_payload_bytes"
    assert native.close_reasons()[2] == "early" and "rx_datagrams" in native.stat_names()
    with pytest.raises(OptionError, match="must not exceed"):
        registry.create("ltp", {"threshold_min": 0.9, "threshold_max": 0.8})


@pytest.mark.parametrize("auth", [True, False])
def test_timeouts_close_and_another_session(auth: bool) -> None:
    layout = Layout.single(1024)
    ps_port, w_port = free_ports(2)
    transport = registry.create("ltp", {"auth": auth})
    ps = transport.serve(("127.0.0.1", ps_port), [("127.0.0.1", w_port)], layout)
    with pytest.raises(TransportTimeout):
        ps.wait_for_workers(0.05)
    with pytest.raises(TransportTimeout):
        ps.gather(0, 0.05)
    # A worker of another session (same key) and one under another key are never greeted; the
    # PS counts their datagrams: with auth on every datagram under another key fails its MAC.
    mine = transport.session
    others = {"wrong_session": Session((mine.session_id + 1) % 2**32, mine.secret),
              "bad_mac" if auth else "wrong_session": Session.draw()}
    for counter, session in others.items():
        other_transport = registry.create("ltp", {"auth": auth})
        other_transport.use_session(session)
        other = other_transport.connect(0, ("127.0.0.1", w_port), ("127.0.0.1", ps_port), layout)
        before = ps.stats()[counter]
        serving = threading.Thread(target=ps.service, args=(0.3,))
        serving.start()
        try:
            with other, pytest.raises(TransportTimeout):
                other.join(0.1)
        finally:
            serving.join()                       # never close a handle another thread is using
        assert ps.stats()[counter] > before, counter
    with pytest.raises(TransportError, match="floats"):
        ps.broadcast(0, np.zeros(10, np.float32), 0.05)
    ps.close()
    ps.close()                                   # safe twice
    assert ps.stats() == {}
    with pytest.raises(TransportError, match="closed"):
        ps.gather(0, 0.05)


def test_plot_profiles_snr_in_observe_and_average_has_no_side_effects() -> None:
    layout = Layout.from_sizes([("signal.weight", 4000), ("noise.weight", 4000), ("bias", 10)])
    ps_port, w_port = free_ports(2)
    t = registry.create("plot", {"profile_iterations": 2, "bound_min": 0.7})
    with t.serve(("127.0.0.1", ps_port), [("127.0.0.1", w_port), ("127.0.0.1", w_port + 1)],
                 layout) as ps:
        rng = np.random.default_rng(3)
        common = rng.standard_normal(layout.n_floats)
        deliveries = [Delivery.whole((common + 0.1 * rng.standard_normal(layout.n_floats))
                                     .astype(np.float32), layout) for _ in range(2)]
        for _ in range(3):
            ps.average(deliveries)
        assert ps.profiled == 0 and ps.bounds == [1.0, 1.0, 1.0]   # average() learns nothing
        ps.observe(0, deliveries)
        assert ps.profiled == 1 and ps.bounds == [1.0, 1.0, 1.0]
        ps.observe(1, deliveries)
        assert ps.profiled == 2 and ps.bounds[2] == 1.0 and 0.7 <= min(ps.bounds[:2]) < 1.0
        ps.observe(2, deliveries)                                   # profiling is over
        assert ps.profiled == 2
        assert "snr:signal.weight" in ps.stats()


@pytest.mark.parametrize("slug", ["ltp", "plot"])
def test_authenticated_job_delivers_whole_and_rejects_nothing(slug: str) -> None:
    layout = Layout.from_sizes([("w", N_FLOATS - 1000), ("b", 1000)])
    transport = registry.create(slug, {"auth": True})
    ports = free_ports(2)
    ps_addr, w_addr = ("127.0.0.1", ports[0]), ("127.0.0.1", ports[1])
    errors = []

    def worker() -> None:
        try:
            with transport.connect(0, w_addr, ps_addr, layout) as w:
                w.join(TIMEOUT_S)
                for it in range(2):
                    w.push(it, gradient(0, it), TIMEOUT_S)
                    w.pull(it, TIMEOUT_S)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker, daemon=True)
    with transport.serve(ps_addr, [w_addr], layout) as ps:
        thread.start()
        ps.wait_for_workers(TIMEOUT_S)
        for it in range(2):
            (d,) = ps.gather(it, TIMEOUT_S)
            assert d.received_frac == 1.0 and np.array_equal(d.values, gradient(0, it))
            ps.broadcast(it, params(it), TIMEOUT_S)
        thread.join(TIMEOUT_S)
        stats = ps.stats()
    assert not errors, errors
    assert all(stats[name] == 0 for name in native.rejection_stats()), stats


def test_a_worker_with_another_layout_is_refused() -> None:
    """The PS knows the size of every message it receives: a gradient of another size never
    opens a message, it is counted (bad_shape), and the gather waits for a real one."""
    ps_port, w_port = free_ports(2)
    transport = registry.create("ltp")
    with transport.serve(("127.0.0.1", ps_port), [("127.0.0.1", w_port)],
                         Layout.single(N_FLOATS)) as ps, \
            transport.connect(0, ("127.0.0.1", w_port), ("127.0.0.1", ps_port),
                              Layout.single(N_FLOATS - 4)) as w:
        serving = threading.Thread(target=ps.service, args=(0.5,))
        serving.start()
        try:
            w.join(TIMEOUT_S)
            with pytest.raises(TransportTimeout):
                w.push(0, gradient(0, 0, N_FLOATS - 4), 0.3)
        finally:
            serving.join()
        with pytest.raises(TransportTimeout):
            ps.gather(0, 0.05)
        assert ps.stats()["bad_shape"] > 0


class _SealingSender:
    """A worker's core driven by hand (sans-IO, through the binding's C functions) behind a plain
    UDP socket: its datagrams are genuine and sealed, and the test decides what goes out, altered
    or not, one at a time or as one GSO write."""

    def __init__(self, session: Session, settings: dict, addr: tuple[str, int]) -> None:
        self.ffi, self.lib = native._core()
        cfg = native._config({**settings, "session_id": session.session_id, "cc": 0})
        self.core = self.lib.ltp_core_new(cfg, 0)
        self.lib.ltp_core_add_peer(self.core, native.rank_server())
        key = session.pair_key(0, SERVER)[:native.key_bytes()]
        self.lib.ltp_core_set_peer_key(self.core, 0, key, len(key))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(addr)
        self.now = 1_000_000

    def message(self, msg_id: int, values: np.ndarray) -> list[bytes]:
        """The DATA datagrams of one message, in order (cc off: all due at once)."""
        buf, slot = self.ffi.new("uint8_t[]", 65536), self.ffi.new("int *")
        self.lib.ltp_core_send(self.core, 0, msg_id, 0, self.ffi.from_buffer(values), values.nbytes,
                               0, self.now)
        out = []
        while (n := self.lib.ltp_core_poll_tx(self.core, self.now, buf, 65536, slot)) > 0:
            if buf[3] == 1:   # docs/ltp-protocol.md §2: the type byte; 1 is DATA
                out.append(bytes(self.ffi.buffer(buf, n)))
        self.lib.ltp_core_send_release(self.core, 0, msg_id, 0)
        return out

    def close(self) -> None:
        self.sock.close()
        self.lib.ltp_core_free(self.core)


def _wait_for(end: native.Endpoint, name: str, at_least: float) -> dict[str, float]:
    deadline = time.monotonic() + TIMEOUT_S
    while (stats := end.stats())[name] < at_least:
        assert time.monotonic() < deadline, f"{name} stayed at {stats[name]:g}"
        time.sleep(0.001)
    return stats


def _flip_payload_byte(datagram: bytes, at: int) -> bytes:
    payload_at = 52   # LTP_DATA_HDR_BYTES; the trailer (number and tag) is the last 16 bytes
    b = bytearray(datagram)
    b[payload_at + at] ^= 0x01
    return bytes(b)


def test_mac_covers_payloads_read_into_place_and_gro_runs() -> None:
    """With auth on, one flipped payload byte is refused as bad_mac on the receive paths that do
    not hand the core a datagram in one piece: a DATA read straight into its guessed place (split
    from its header and tag), and a datagram inside a GRO run. The genuine copies that follow
    complete the message exactly."""
    session = Session.draw()
    settings = {"auth": 1, "max_udp_payload_bytes": 16384, "max_msg_bytes": 1 << 22}
    chunk = 16384 - 52 - 16
    ps_port, w_port = free_ports(2)
    sender = _SealingSender(session, settings, ("127.0.0.1", w_port))
    n_floats = 10 * chunk // 4
    with native.Endpoint({**settings, "session_id": session.session_id}, native.rank_server(),
                         ("127.0.0.1", ps_port)) as end:
        end.expect(0, 4 * n_floats)
        end.set_peer_key(end.add_peer(0, ("127.0.0.1", w_port)), session.pair_key(SERVER, 0))
        dest = ("127.0.0.1", ps_port)

        # 1. Read into place: packet 0 opens the message, so the driver reads the next DATA's
        # payload straight into the place of packet 1.
        v1 = gradient(0, 1, n_floats)
        dg = sender.message(1, v1)
        assert len(dg) == 10 and all(len(d) == 16384 for d in dg)
        sender.sock.sendto(dg[0], dest)
        _wait_for(end, "rx_datagrams", 1)
        sender.sock.sendto(_flip_payload_byte(dg[1], 4000), dest)
        stats = _wait_for(end, "bad_mac", 1)
        assert stats["rx_placed"] == 1, "the altered datagram did not take the read-into-place path"
        for d in dg[1:]:
            sender.sock.sendto(d, dest)
        values, mask = np.zeros(n_floats, np.float32), np.zeros(n_floats, bool)
        end.recv([native.RecvItem(0, 1, 0, values, mask)], TIMEOUT_S)
        assert np.array_equal(values.view(np.uint32), v1.view(np.uint32)) and mask.all()
        stats = end.stats()
        assert stats["rx_placed"] >= 2 and stats["bad_mac"] == 1 and stats["dup_conflict"] == 0

        # 2. A GRO run: three datagrams as one GSO write (loopback hands it to a UDP_GRO socket
        # whole), the second altered.
        if not end.offload["gro"]:
            pytest.skip("this kernel gives the socket no GRO runs")
        v2 = gradient(0, 2, n_floats)
        dg = sender.message(2, v2)
        sender.sock.setsockopt(socket.SOL_UDP, 103, 16384)   # UDP_SEGMENT
        run = dg[0] + _flip_payload_byte(dg[1], 9) + dg[2]
        sender.sock.sendto(run, dest)
        stats = _wait_for(end, "bad_mac", 2)
        assert stats["rx_gro_runs"] >= 1, "the run was not read as one"
        sender.sock.setsockopt(socket.SOL_UDP, 103, 0)
        for d in dg[1:]:
            sender.sock.sendto(d, dest)
        values, mask = np.zeros(n_floats, np.float32), np.zeros(n_floats, bool)
        end.recv([native.RecvItem(0, 2, 0, values, mask)], TIMEOUT_S)
        assert np.array_equal(values.view(np.uint32), v2.view(np.uint32)) and mask.all()
        assert end.stats()["bad_mac"] == 2
    sender.close()
