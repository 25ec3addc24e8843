"""Writes the committed seed corpus of the fuzz targets (fuzz/corpus/): small programs in
fuzz_core.c's operation language that reach every kind of step, programs for fuzz_rx.c (the
driver's receive batches: in place, GRO runs, forgeries, replays, a full table), and a few driver
inputs for fuzz_udp.c. Run once; libFuzzer grows its own corpus in build/fuzz-corpus/ from these.

    python3 transports/native/fuzz/make_seeds.py
"""

import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
AUTH, STRICT, CC_OFF, RANDOM, FAIR, ID_WRAP, TIME_WRAP, SMALL_RING = 1, 2, 4, 8, 16, 32, 64, 128
TICK, JUMP, POLL, DELIVER, SEND, TAKE, F_DATA, F_ACK, F_CLOSE, F_HELLO, HELLO, RAW, FLIP, RELEASE = range(14)
RUN = 14
S = 0x80   # the operation is about the PS


def run(rounds: int = 7) -> bytes:
    return bytes([RUN | (rounds << 4)])


def exchange(times: int = 1) -> bytes:
    """The worker pushes, the PS takes and broadcasts, the worker takes, both release."""
    one = bytes([SEND]) + run() + bytes([TAKE | S, SEND | S]) + run() + bytes([TAKE, RELEASE, RELEASE | S])
    return one * times


def lossy(times: int) -> bytes:
    out = bytes([SEND])
    for i in range(times):   # alternate loss, duplication and reordering on both queues
        out += bytes([POLL, DELIVER, 7, 1 + (i % 3), POLL | S, DELIVER | S, 3, 0, TICK, 200])
    return out + run() + bytes([TAKE | S])


SEEDS = {
    "exchange": bytes([0, 0x41]) + exchange(2),
    "strict-auth-layers": bytes([AUTH | STRICT, 0x47]) + exchange(2),
    "id-and-time-wrap": bytes([STRICT | ID_WRAP | TIME_WRAP, 0x10]) + exchange(20),
    "lossy": bytes([STRICT, 0x80]) + lossy(12),
    "lossy-auth-fair-random": bytes([AUTH | FAIR | RANDOM, 0x83]) + lossy(12),
    "cc-off-small-ring": bytes([CC_OFF | SMALL_RING | STRICT, 0x46]) + exchange(6),
    "forged-data": bytes([STRICT, 0x20]) + bytes([SEND, POLL, DELIVER, 2, 0])
    + bytes([F_DATA, 0x07]) + struct.pack("<III", 16, 0, 0) + bytes([1, 4]) + b"\x00\x00\x80\x7f" * 4
    + bytes([0, 1]) + run() + bytes([TAKE | S]),
    "forged-ack-close": bytes([0, 0x30]) + bytes([SEND, POLL, DELIVER, 4, 0, POLL | S, DELIVER | S, 4, 0])
    + bytes([F_ACK, 0x48]) + struct.pack("<II", 0, 1) + bytes([2, 0xFF, 0, 1])
    + bytes([F_CLOSE, 0x44]) + struct.pack("<II", 5, 4) + bytes([1]) + run(),
    "hello": bytes([AUTH, 0x10]) + bytes([HELLO, POLL, DELIVER, 1, 0, POLL | S, DELIVER | S, 1, 0])
    + bytes([F_HELLO, 0, 0x01]) + struct.pack("<I", 12345) + bytes([1]) + bytes([F_HELLO | S, 1, 0, 0]),
    "time-jump": bytes([0, 0x22]) + bytes([SEND, POLL, JUMP]) + struct.pack("<I", 0xFFFFFFF0)
    + bytes([DELIVER, 9, 0]) + run() + bytes([TAKE | S]),
    "raw-and-flip": bytes([AUTH, 0x15]) + bytes([SEND, POLL, FLIP, 0, 30, 1, DELIVER, 5, 0, RAW | S, 24])
    + b"LP\x04\x01" + bytes(20) + bytes([1]) + run(),
    # the PS's peers that never answer (the index holds several slots): a send to one, a HELLO to
    # the other, and a DATA from each, forged from the worker's and sealed with the key
    "phantoms": bytes([AUTH, 0x41]) + bytes([SEND, POLL, SEND | S, SEND | S, HELLO | S | 0x10, POLL | S])
    + bytes([F_DATA | S, 0, 0, 0, 1, F_DATA | S | 0x10, 0, 0, 0, 1]) + run() + bytes([TAKE | S, RELEASE | S])
    + run(),
}


def udp_seed(flags: int, n_peers: int, alen: int, ctl: bytes) -> bytes:
    src = struct.pack("<HH4s8x", 2, 0x1388, bytes([10, 0, 0, 1]))
    peers = b"".join(bytes([10, 0, 0, i + 1]) + struct.pack("<H", 0x1388) for i in range(n_peers))
    return bytes([flags, n_peers, alen, len(ctl)]) + src + peers + ctl


UDP_SEEDS = {
    "peer": udp_seed(1, 3, 16, b""),
    "stranger": udp_seed(0, 3, 16, b""),
    "timestamp": udp_seed(4 | 0x30, 1, 16, struct.pack("<QiiQq", 32, 1, 35, 1700000000, 5000) + bytes(8)),
    "short-cmsg": udp_seed(4, 1, 16, struct.pack("<Qii", 20, 1, 35) + bytes(8)),
}

# fuzz_rx.c's operations, and its configuration bits
R_SEND, R_POLL, R_BATCH, R_CONTROL, R_POST, R_TAKE, R_RELEASE, R_TIME = 0, 1, 2, 4, 5, 6, 7, 8
R_AUTH, R_SMALL_TABLE = 1, 16
GENUINE, GRO, FLIP, CUT, UNTAGGED = 0, 6, 7, 8, 9


def batch(*slots: tuple) -> bytes:
    """One receive batch; a slot is (kind, flags, pool index, extra bytes...)."""
    return bytes([R_BATCH, len(slots) - 1]) + b"".join(bytes(slot) for slot in slots)


def rx_exchange(packets: int, post: bool) -> bytes:
    """A message of `packets` DATA, maybe posted for, read one then the rest (into place)."""
    head = bytes([R_SEND, 0, packets - 1, 0, 0]) + (bytes([R_POST, 0, 0]) if post else b"")
    rest = batch(*[(GENUINE, 0, i) for i in range(1, packets)])
    return head + bytes([R_POLL]) + batch((GENUINE, 0, 0)) + rest + bytes([R_CONTROL, 0, R_TAKE])


RX_SEEDS = {
    "posted-in-place": bytes([R_AUTH]) + rx_exchange(6, True),
    "in-place-no-auth": bytes([0]) + rx_exchange(6, False),
    "gro-run": bytes([0, R_SEND, 0, 5, 0, 0, R_POLL]) + batch((GRO, 0, 0, 5))
    + bytes([R_CONTROL, 0, R_TAKE]),
    "gro-run-cut-elsewhere": bytes([R_AUTH, R_SEND, 0, 5, 0, 0, R_POLL])
    + batch((GRO, 8, 0, 5, 100, 1)) + bytes([R_TAKE]),
    "forgeries-then-genuine": bytes([R_AUTH, R_SEND, 0, 5, 0, 0, R_POLL]) + batch((GENUINE, 0, 0))
    + batch((FLIP, 0, 1, 60, 0, 4), (CUT, 0, 2, 30, 0), (UNTAGGED, 0, 3), (GENUINE, 1, 4))
    + batch(*[(GENUINE, 0, i) for i in range(1, 6)]) + bytes([R_CONTROL, 0, R_TAKE]),
    "replays": bytes([R_AUTH]) + rx_exchange(4, True) + batch(*[(GENUINE, 0, i) for i in range(4)]),
    "full-table": bytes([R_AUTH | R_SMALL_TABLE, R_SEND, 2, 3, 0, 0, R_SEND, 1, 3, 0, 0,
                         R_SEND, 0, 3, 0, 0, R_POST, 1, 0, R_POLL])
    + batch(*[(GENUINE, 0, i) for i in (4, 5, 0, 8, 1, 9, 2, 3)]) + bytes([R_CONTROL, 0, R_TAKE])
    + bytes([R_TIME, 0, 0, 40, R_RELEASE, 0, R_POLL, R_CONTROL, 0]),
}

for folder, seeds in (("core", SEEDS), ("rx", RX_SEEDS), ("udp", UDP_SEEDS)):
    (HERE / "corpus" / folder).mkdir(parents=True, exist_ok=True)
    for name, blob in seeds.items():
        (HERE / "corpus" / folder / name).write_bytes(blob)
