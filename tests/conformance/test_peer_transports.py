"""Every peer-to-peer transport (transports.peer.SCHEMES) honours its contract, over loopback.

Four peers in one process, each on 127.0.0.1 with its own port (``ports``); their background
threads receive while the test's threads send. Loss is made with the mcast test hook ``drop``
(the receiver discards chosen DATA datagrams as if the network had lost them). Group mode needs
the emulated switches and is not tested here.
"""

import collections
import contextlib
import importlib
import socket
import threading
import time

import numpy as np
import pytest

from transports.base import OptionError, Session
from transports.peer import SCHEMES, create, parse, wire
from transports.peer.auth import Sealer
from tests.conformance.loopback import free_ports, on_free_ports

N_PEERS = 4
N_FLOATS = 20_011          # 58 datagrams of 1400 bytes, the last one short
RATE_MBPS = 400.0
IPS = ["127.0.0.1"] * N_PEERS


def _open(slug, options, ranks, drops, session, ports):
    """The ends of ``ranks`` on ``ports``, and the ports; what was opened is closed on failure."""
    ends = {}
    try:
        for r in ranks:
            hook = {"drop": drops[r]} if drops and r in drops else {}
            ends[r] = create(slug, r, IPS, 0, N_FLOATS, session, options, ports=ports, **hook)
    except BaseException:
        for end in ends.values():
            end.close()
        raise
    return ends, ports


@contextlib.contextmanager
def _peers(slug, options=None, *, ranks=range(N_PEERS), drops=None):
    """Open the ends of ``ranks`` (the others' addresses stay free for the test to use);
    ``drops`` gives some ranks the mcast test hook ``drop``."""
    # Ports free for TCP, which the tcp ends need; the UDP ends take them too.
    session = Session.draw()
    ends, ports = on_free_ports(
        N_PEERS, lambda ports: _open(slug, options, ranks, drops, session, ports),
        socket.SOCK_STREAM)
    try:
        yield ends, ports, session
    finally:
        for end in ends.values():
            end.close()


def _vector(rng):
    """Any bit pattern, NaNs, infinities and negative zero included."""
    v = rng.integers(0, 2**32, N_FLOATS, dtype=np.uint64).astype(np.uint32)
    v[:4] = [0x7FC00001, 0x7F800000, 0xFF800000, 0x80000000]
    return v.view(np.float32)


def _collect(end, n, timeout_s=5.0):
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += end.take()
        time.sleep(0.005)
    return got + end.take()


def _same_bits(a, b):
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("slug", sorted(SCHEMES))
def test_every_sender_reaches_exactly_its_receivers_bit_exact(slug):
    rng = np.random.default_rng(1)
    rounds = 3
    plan = {(s, k): [(s + 1 + (k + i) % (N_PEERS - 1)) % N_PEERS for i in range(1 + (s + k) % 3)]
            for s in range(N_PEERS) for k in range(rounds)}
    sent = {key: _vector(rng) for key in plan}
    reports, errors = {}, []
    with _peers(slug) as (ends, _, _):
        for k in range(rounds):
            def send(s, k=k):
                try:
                    reports[s, k] = ends[s].send(k, sent[s, k], plan[s, k], rate_mbps=RATE_MBPS,
                                                 timeout_s=10.0)
                except Exception as exc:   # surfaced below
                    errors.append(exc)
            threads = [threading.Thread(target=send, args=(s,)) for s in range(N_PEERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert not errors
        for r in range(N_PEERS):
            expected = {(s, k) for (s, k), to in plan.items() if r in to}
            got = _collect(ends[r], len(expected))
            assert {(m.sender, m.round) for m in got} == expected and len(got) == len(expected)
            for m in got:
                assert m.mask is None and m.received_frac == 1.0 and not m.early
                assert m.values.dtype == np.float32
                assert _same_bits(m.values, sent[m.sender, m.round])
        for (s, k), report in reports.items():
            assert report.delivered == {r: 1.0 for r in plan[s, k]}
            assert report.unfinished == () and report.packets > 0 and report.wire_bytes > 0
        keys = importlib.import_module(f"transports.peer.{slug}").STATS_KEYS
        for end in ends.values():
            stats = end.stats()
            assert set(stats) == set(keys) and stats.get("handler_errors", 0) == 0


def _dropper(frac, seed):
    rng = np.random.default_rng(seed)
    return lambda sender, round_, seq: rng.random() < frac


@pytest.mark.parametrize("auth", [True, False])
def test_mcast_reliable_repairs_a_lossy_receiver_completely(auth):
    rng = np.random.default_rng(2)
    v = _vector(rng)
    with _peers("mcast", {"close_frac": 1.0, "auth": auth},
                drops={1: _dropper(0.1, 3)}) as (ends, _, _):
        report = ends[0].send(0, v, [1, 2], rate_mbps=RATE_MBPS, timeout_s=10.0)
        assert report.retransmits > 0 and report.unfinished == ()
        assert report.delivered == {1: 1.0, 2: 1.0}
        for r in (1, 2):
            (m,) = _collect(ends[r], 1)
            assert m.mask is None and not m.early and _same_bits(m.values, v)
        assert ends[1].stats()["test_dropped"] > 0


def test_mcast_closes_early_with_an_exact_mask():
    rng = np.random.default_rng(4)
    v = _vector(rng)
    lost = lambda sender, round_, seq: seq % 10 == 3   # 6 of 58 datagrams, about 10 %
    with _peers("mcast", {"close_frac": 0.8}, drops={1: lost}) as (ends, _, _):
        report = ends[0].send(0, v, [1, 2], rate_mbps=RATE_MBPS, timeout_s=10.0)
        (m,) = _collect(ends[1], 1)
        per = 1400 // 4
        expected_mask = (np.arange(N_FLOATS) // per) % 10 != 3
        assert m.early and m.mask is not None and np.array_equal(m.mask, expected_mask)
        assert 0.8 <= m.received_frac == pytest.approx(expected_mask.mean())
        assert _same_bits(m.values[m.mask], v[m.mask]) and not m.values[~m.mask].any()
        assert report.retransmits == 0 and report.unfinished == ()
        assert report.delivered[1] == pytest.approx(m.received_frac) and report.delivered[2] == 1.0
        assert ends[1].stats()["early_closes"] == 1


def _garbage_mcast(session, ports, forger, auth):
    """Datagrams peer 0 must drop, sent by the test from peer 3's own address (``forger``),
    most sealed as peer 3 would (with the run's key when ``auth``); by the counter each should
    land in."""
    sealer = Sealer(3, session, auth)
    other_run = Sealer(3, Session(session.session_id ^ 1, session.secret), auth)
    payload = bytes(1400)

    def data(seq, count, body=payload, by=sealer):
        return b"".join(by.parts(wire.DATA, 0, seq, count, body=body))

    as_9, as_2 = bytearray(data(0, 58)), bytearray(data(0, 58))
    as_9[6:8], as_2[6:8] = (9).to_bytes(2, "big"), (2).to_bytes(2, "big")
    junk = [
        ("malformed", b"\x00" * 3),                                  # shorter than a header
        ("malformed", np.random.default_rng(5).bytes(600)),           # random bytes
        ("foreign", data(0, 58, by=other_run)),                       # another session
        ("malformed", data(0, 58, body=payload[:700])),               # truncated payload
        ("malformed", data(58, 58)),                                  # seq out of range
        ("malformed", data(0, 57)),                                   # wrong count
        ("stranger", bytes(as_9)),                                    # no such rank
        ("stranger", bytes(as_2)),                                    # rank 2 from 3's address
        ("malformed", sealer.seal(wire.STATUS, 0, 0, 1, 0, 0, 58, 10 ** 9)),   # nonsense
    ]
    if auth:
        replayed = data(0, 57)
        junk += [
            ("bad_mac", data(0, 58, by=Sealer(3, Session(session.session_id, bytes(32)),
                                              True))),                 # a guessed key
            ("bad_mac", data(0, 58, by=Sealer(3, session, False))),   # no tag
            ("malformed", replayed),                   # through the gate, refused as wrong count
            ("replayed", replayed),                    # the same bytes again: not even that far
        ]
    for _, raw in junk:
        forger.sendto(raw, ("127.0.0.1", ports[0]))
    return collections.Counter(reason for reason, _ in junk)


@pytest.mark.parametrize("auth", [True, False])
def test_mcast_drops_and_counts_garbage_and_still_delivers(auth):
    v = _vector(np.random.default_rng(6))
    with _peers("mcast", {"auth": auth}, ranks=range(3)) as (ends, ports, session), \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
        forger.bind(("127.0.0.1", ports[3]))
        expected = _garbage_mcast(session, ports, forger, auth)
        report = ends[1].send(0, v, [0], rate_mbps=RATE_MBPS, timeout_s=10.0)
        (m,) = _collect(ends[0], 1)
        assert _same_bits(m.values, v) and report.delivered == {0: 1.0}
        stats = ends[0].stats()
        assert {k: stats[k] for k in expected} == expected   # loopback loses nothing
        assert sum(ends[0].rejections().values()) == sum(expected.values())
        assert stats.get("handler_errors", 0) == 0 and stats["delivered"] == 1


def test_tcp_drops_and_counts_garbage_and_still_delivers():
    v = _vector(np.random.default_rng(7))
    with _peers("tcp", ranks=range(3)) as (ends, ports, session):
        from transports.peer.tcp import HEADER, MAGIC
        bad = [b"JUNKJUNKJUNKJUNKJUNK",
               HEADER.pack(MAGIC, session.session_id ^ 1, 1, 0, 4 * N_FLOATS),
               HEADER.pack(MAGIC, session.session_id, 1, 0, 12),
               HEADER.pack(MAGIC, session.session_id, 9, 0, 4 * N_FLOATS)]
        for data in bad:
            with socket.create_connection(("127.0.0.1", ports[0])) as s:
                s.sendall(data)
                s.settimeout(5.0)
                assert s.recv(1) == b""   # the receiver hangs up
        report = ends[1].send(0, v, [0], timeout_s=10.0)
        (m,) = _collect(ends[0], 1)
        assert _same_bits(m.values, v) and report.delivered == {0: 1.0}
        stats = ends[0].stats()
        assert stats["malformed"] == 2 and stats["foreign"] == 1 and stats["stranger"] == 1


@pytest.mark.parametrize("slug, options", [("mcast", None), ("mcast", {"max_wait_ms": 100}),
                                           ("tcp", None)])
def test_a_receiver_that_is_gone_is_unfinished_at_the_timeout(slug, options):
    v = _vector(np.random.default_rng(8))
    with _peers(slug, options, ranks=range(3)) as (ends, _, _):   # peer 3 never started
        t0 = time.monotonic()
        report = ends[0].send(0, v, [1, 3], rate_mbps=RATE_MBPS, timeout_s=0.6)
        assert 0.5 <= time.monotonic() - t0 < 3.0
        assert report.unfinished == (3,) and report.delivered == {1: 1.0}
        (m,) = _collect(ends[1], 1)
        assert _same_bits(m.values, v)


@pytest.mark.parametrize("slug, options", [
    ("mcast", {"close_frac": 0}), ("mcast", {"close_frac": 1.5}), ("mcast", {"poll_ms": -1}),
    ("mcast", {"payload_bytes": 1402}), ("mcast", {"payload_bytes": 1500}),
    ("mcast", {"min_frac": 0.9, "close_frac": 0.8}), ("mcast", {"nope": 1}),
    ("mcast", {"auth": "yes"}), ("mcast", {"replay_window": 8}), ("mcast", {"round_window": 0}),
    ("tcp", {"cc": "vegas"}), ("tcp", {"close_frac": 0.9}), ("udp", {}),
])
def test_bad_options_are_refused_in_one_sentence(slug, options):
    with pytest.raises(OptionError) as info:
        create(slug, 0, IPS, 0, N_FLOATS, Session.draw(), options,
               ports=free_ports(N_PEERS, socket.SOCK_STREAM))
    text = str(info.value)
    assert text.endswith(".") and "\n" not in text and text.count(". ") == 0


def test_bad_send_arguments_are_refused():
    with _peers("mcast", ranks=[0]) as (ends, _, _):
        v = np.zeros(N_FLOATS, np.float32)
        for bad in (dict(receivers=[0]), dict(receivers=[1, 1]), dict(receivers=[7]),
                    dict(values=np.zeros(3, np.float32)), dict(values=np.zeros(N_FLOATS)),
                    dict(round_=-1), dict(group="10.0.0.1")):
            args = {"round_": 0, "values": v, "receivers": [1], **bad}
            with pytest.raises(ValueError):
                ends[0].send(args.pop("round_"), args.pop("values"), args.pop("receivers"),
                             **args)


def test_parse_reads_scheme_text():
    assert parse("mcast+close_frac=0.9+poll_ms=2") == ("mcast", {"close_frac": 0.9, "poll_ms": 2})
    assert parse("tcp+cc=bbr") == ("tcp", {"cc": "bbr"})
    for bad in ("udp", "mcast+close_frac"):
        with pytest.raises(OptionError):
            parse(bad)


def test_mcast_sender_closes_a_round_it_cannot_repair():
    v = _vector(np.random.default_rng(9))
    never = lambda sender, round_, seq: seq % 10 == 3   # lost on every try, repairs included
    with _peers("mcast", {"close_frac": 1.0, "min_frac": 0.5, "max_wait_ms": 100},
                drops={1: never}) as (ends, _, _):
        report = ends[0].send(0, v, [1, 2], rate_mbps=RATE_MBPS, timeout_s=10.0)
        (m,) = _collect(ends[1], 1)
        assert m.early and 0.85 < m.received_frac < 0.95 and _same_bits(m.values[m.mask],
                                                                      v[m.mask])
        assert report.retransmits > 0 and report.unfinished == ()
        assert report.delivered == {1: pytest.approx(m.received_frac), 2: 1.0}
        assert report.seconds < 2.0
