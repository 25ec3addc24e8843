"""The Wireshark dissector (transports/wireshark/ltp.lua) on datagrams built here byte by byte
from the documented layouts (docs/ltp-protocol.md section 2, docs/peer-transports.md): every
field lands where the documents put it, a cut datagram is not malformed, and a datagram the
receiver would refuse is flagged. The emulation test reads a real run's capture."""

import shutil
import struct

import pandas as pd
import pytest

from harness.reporting import wire
from transports.base import UserError

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (./setup.sh)")

PS, W1 = "10.0.0.254", "10.0.0.1"
TRAILER = bytes(range(16))    # datagram number and tag: any bytes, nobody checks them here


def _ip(text: str) -> bytes:
    return bytes(int(x) for x in text.split("."))


def _frame(src: str, dst: str, payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", 5000, 5000, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, _ip(src),
                     _ip(dst))
    return b"\x00\x00\x00\x00\x00\x02" + b"\x00\x00\x00\x00\x00\x01" + b"\x08\x00" + ip + udp


def _pcap(path, frames, snaplen=65535):
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)]
    for i, frame in enumerate(frames):
        kept = frame[:snaplen]
        out.append(struct.pack("<IIII", 1, i, len(kept), len(frame)) + kept)
    path.write_bytes(b"".join(out))
    return path


def _common(kind, flags=0, sender=0, msg_id=7, segment=0, critical=0, version=5):
    return struct.pack("<HBBBBHIIHH", 0x504C, version, kind, flags, 1, sender, 0xABCD, msg_id,
                       segment, critical)


def _data(index, count, chunk=64, flags=0, payload_len=None, open_back=2, version=5):
    total = chunk * count
    head = _common(1, flags, version=version) + struct.pack(
        "<IIIIHHIII", index, count, index * chunk, total,
        chunk if payload_len is None else payload_len, open_back if version >= 5 else 0,
        index + 1, 1000, 50)
    return head + bytes(chunk) + TRAILER


def _ack(base, bitmap: bytes):
    return (_common(2, sender=65535) + struct.pack("<IIIIIHHI", 5, base, 1000, 3, 2,
                                                   8 * len(bitmap), 0, 12345)
            + bitmap + TRAILER)


def _close(reason, received=9, count=10):
    return _common(3, sender=65535) + struct.pack("<IIB3xII", received, count, reason, 1000,
                                                  4) + TRAILER


def _peer(kind, tail: bytes, body=b"", sender=2, round_=5):
    head = struct.pack("!4sBBHIIBBHI", b"LTPp", 2, kind, sender, 0xABCD, round_, 1, 0, 0, 99)
    return head + tail + body + TRAILER


def test_every_core_and_peer_datagram_dissects_where_the_documents_put_its_fields(tmp_path):
    frames = [_frame(W1, PS, _common(4, msg_id=0x1234) + TRAILER),
              _frame(W1, PS, _data(3, 10, flags=0x02)),
              _frame(W1, PS, _data(4, 10, version=4)),
              _frame(PS, W1, _ack(2, b"\x05")),
              _frame(PS, W1, _close(2)),
              _frame(W1, PS, _peer(1, struct.pack("!HH", 4, 9), bytes(16))),
              _frame(W1, PS, _peer(3, struct.pack("!HHBBHI", 1, 0, 1, 0, 9, 100), b"\xff\x01"))]
    pcap = _pcap(tmp_path / "good.pcap", frames)
    assert wire.problems(pcap) == 0
    core = wire.dissect(pcap)
    assert list(core["ltpt.type"]) == [4, 1, 1, 2, 3]
    data, old, ack, close = core.iloc[1], core.iloc[2], core.iloc[3], core.iloc[4]
    assert (data["ltpt.index"], data["ltpt.count"], data["ltpt.tx_seq"]) == (3, 10, 4)
    assert data["ltpt.open_back"] == 2 and pd.isna(old["ltpt.open_back"])   # version 4: reserved
    assert data["ltpt.flags"] == 0x02 and data["ltpt.sender"] == 0
    assert (ack["ltpt.ack.base"], ack["ltpt.ack.rate_hint"]) == (2, 12345)
    assert (close["ltpt.close.reason"], close["ltpt.received"], close["ltpt.close.count"]) == \
        (2, 9, 10)
    assert wire.count(pcap, "ltpt.retransmission") == 1
    assert wire.count(pcap, "ltpt.early_close") == 1
    assert wire.count(pcap, "ltpt.ack.bitmap_held == 2") == 1   # 0x05: two indices held
    peer = wire.dissect(pcap, wire.MCAST_FIELDS, "ltpp")
    assert list(peer["ltpp.kind"]) == [1, 3]
    assert (peer.iloc[0]["ltpp.seq"], peer.iloc[0]["ltpp.count"]) == (4, 9)
    assert (peer.iloc[1]["ltpp.target"], peer.iloc[1]["ltpp.have_floats"]) == (1, 100)
    assert wire.count(pcap, "ltpp.closed") == 1


def test_a_cut_capture_is_not_malformed_and_a_bad_datagram_is(tmp_path):
    cut = _pcap(tmp_path / "cut.pcap", [_frame(W1, PS, _data(0, 10, chunk=1024))], snaplen=96)
    assert wire.problems(cut) == 0 and len(wire.dissect(cut)) == 1
    bad = _pcap(tmp_path / "bad.pcap", [_frame(W1, PS, _data(0, 10, payload_len=60)),
                                         _frame(W1, PS, _data(10, 10))])
    assert wire.problems(bad) == 2      # a payload length that disagrees; an index past the count


def test_a_missing_capture_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no such capture"):
        wire.dissect(tmp_path / "none.pcap")
