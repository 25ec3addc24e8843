"""The multicast receiving half's fuzz target (tests/fuzz/peer_rx.py) without a fuzzer: its
committed corpus replays clean, seeded random programs run clean, and its invariants bite (a
gate that believes every tag lets a forgery through, and the target says so)."""

import random

import pytest

from tests.fuzz import peer_rx
from transports.peer.auth import Gate


def _programs(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [bytes([rng.randrange(256) | 1]) + rng.randbytes(rng.randrange(16, 600))
            for _ in range(n)]


def test_the_committed_corpus_replays_clean():
    files = sorted(peer_rx.CORPUS.iterdir())
    assert files, f"no corpus in {peer_rx.CORPUS}"
    for f in files:
        peer_rx.run(f.read_bytes())


def test_random_programs_run_clean_with_and_without_auth():
    for data in _programs(150, 1):
        peer_rx.run(data)
        peer_rx.run(bytes([data[0] & ~1]) + data[1:])


def test_a_gate_that_believes_any_tag_is_caught(monkeypatch):
    monkeypatch.setattr(Gate, "_authentic", lambda self, d: True)
    caught = 0
    for data in _programs(150, 2):
        try:
            peer_rx.run(data)
        except AssertionError:
            caught += 1
    assert caught > 0


@pytest.mark.parametrize("conf", [0, 1])
def test_a_program_that_only_delivers_genuine_rounds_delivers_them(conf):
    # one round of every datagram from sender 1, then each of them delivered once
    h = peer_rx.Harness(conf | 0b10)
    h.emit_round(peer_rx._Bytes(bytes([0, 0, 0xFF, 0xFF])))
    for raw in list(h.pool):
        h.arrive(raw, 1)
    assert h.counters["delivered"] == 1
