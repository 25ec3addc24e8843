"""The datagrams of the multicast peer transport (:mod:`transports.peer.mcast`): layout and codec.

Every datagram opens with the same 16-byte header, network byte order::

    magic "LTPp" | version u8 | kind u8 | from u16 | session u32 | round u32

``from`` is the rank of the peer that emitted the datagram and ``round`` the sender's round the
datagram is about (for STATUS: the round of the message being reported on). After it:

======  ==============================================  =======================================
kind    tail                                            then
======  ==============================================  =======================================
DATA    seq u16, count u16                              the float32 payload of datagram ``seq``
POLL    pass u16, count u16                             nothing
CLOSE   count u16                                       nothing
STATUS  target u16, pass u16, flags u8, 0 u8,           when not closed: a bitmap of the
        count u16, have_floats u32                      datagrams held (bit ``seq``, MSB first)
======  ==============================================  =======================================

``count`` is the number of data datagrams of a message (every peer derives it from ``n_floats``
and ``payload_bytes``, so a mismatch marks a malformed datagram); ``target`` is the rank of the
message's sender; ``flags`` has :data:`CLOSED` (the receiver closed the message) and
:data:`DROPPED` (it closed it with less than ``min_frac`` and delivered nothing).
"""

from __future__ import annotations

import dataclasses
import struct

MAGIC = b"LTPp"
VERSION = 1
DATA, POLL, STATUS, CLOSE = 1, 2, 3, 4
KINDS = (DATA, POLL, STATUS, CLOSE)
CLOSED, DROPPED = 0x01, 0x02

HEADER = struct.Struct("!4sBBHII")
DATA_TAIL = struct.Struct("!HH")
POLL_TAIL = struct.Struct("!HH")
CLOSE_TAIL = struct.Struct("!H")
STATUS_TAIL = struct.Struct("!HHBBHI")
TAILS = {DATA: DATA_TAIL, POLL: POLL_TAIL, STATUS: STATUS_TAIL, CLOSE: CLOSE_TAIL}

IP_UDP_BYTES = 28           # IPv4 + UDP headers, counted in pacing and wire bytes
MTU_BYTES = 1500
MAX_PAYLOAD_BYTES = MTU_BYTES - IP_UDP_BYTES - HEADER.size - DATA_TAIL.size   # 1452
MAX_COUNT = 8 * (MAX_PAYLOAD_BYTES - STATUS_TAIL.size)   # a STATUS bitmap must fit one datagram


@dataclasses.dataclass(frozen=True)
class Datagram:
    """One decoded datagram: the header's fields, the kind's tail and what follows it."""

    kind: int
    sender: int
    session: int
    round: int
    tail: tuple[int, ...]
    body: memoryview


def decode(buf: memoryview) -> Datagram | None:
    """The datagram in ``buf``, or None if it is not one of ours (wrong magic, version, kind or
    too short for its kind). Session, ranks and ranges are the caller's to check."""
    if len(buf) < HEADER.size:
        return None
    magic, version, kind, sender, session, round_ = HEADER.unpack_from(buf)
    if magic != MAGIC or version != VERSION or kind not in TAILS:
        return None
    tail = TAILS[kind]
    if len(buf) < HEADER.size + tail.size:
        return None
    return Datagram(kind, sender, session, round_, tail.unpack_from(buf, HEADER.size),
                    buf[HEADER.size + tail.size:])


def encode(kind: int, sender: int, session: int, round_: int, *tail: int,
           body: bytes = b"") -> bytes:
    """A whole control datagram (DATA goes out as a header plus a view of the payload)."""
    return (HEADER.pack(MAGIC, VERSION, kind, sender, session, round_) + TAILS[kind].pack(*tail)
            + body)


def data_header(sender: int, session: int, round_: int, seq: int, count: int) -> bytes:
    """The 20 bytes in front of a DATA datagram's payload."""
    return encode(DATA, sender, session, round_, seq, count)
