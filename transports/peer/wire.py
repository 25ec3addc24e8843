"""The datagrams of the multicast peer transport (:mod:`transports.peer.mcast`): layout and codec.

Every datagram opens with the same 24-byte header, network byte order::

    magic "LTPp" | version u8 | kind u8 | from u16 | session u32 | round u32 |
    mac u8 | 0 u8 | pseq u48

``from`` is the rank of the peer that emitted the datagram and ``round`` the sender's round the
datagram is about (for STATUS: the round of the message being reported on). ``mac`` says what
the datagram ends with: :data:`MAC_NONE` (nothing) or :data:`MAC_BLAKE2B` (a
:data:`TAG_BYTES`-byte tag over every byte before it, :mod:`transports.peer.auth`). ``pseq`` is
the sender's datagram number: every datagram a peer emits takes the next one (the copies of one
datagram sent to several receivers share it), so a receiver can refuse a replay. After the
header:

======  ==============================================  =======================================
kind    tail                                            then
======  ==============================================  =======================================
DATA    seq u16, count u16                              the float32 payload of datagram ``seq``
POLL    pass u16, count u16                             nothing
CLOSE   count u16                                       nothing
STATUS  target u16, pass u16, flags u8, 0 u8,           when not closed: a bitmap of the
        count u16, have_floats u32                      datagrams held (bit ``seq``, MSB first)
======  ==============================================  =======================================

and then the tag, if ``mac`` says there is one. ``count`` is the number of data datagrams of a
message (every peer derives it from ``n_floats`` and ``payload_bytes``, so a mismatch marks a
malformed datagram); ``target`` is the rank of the message's sender; ``flags`` has
:data:`CLOSED` (the receiver closed the message) and :data:`DROPPED` (it closed it with less than
``min_frac`` and delivered nothing). Version 1 had a 16-byte header (no ``mac`` and ``pseq``)
and no tag; it is refused as malformed.
"""

from __future__ import annotations

import dataclasses
import struct

MAGIC = b"LTPp"
VERSION = 2
DATA, POLL, STATUS, CLOSE = 1, 2, 3, 4
KINDS = (DATA, POLL, STATUS, CLOSE)
CLOSED, DROPPED = 0x01, 0x02
MAC_NONE, MAC_BLAKE2B = 0, 1
TAG_BYTES = 16                  # a MAC_BLAKE2B tag: BLAKE2b keyed, 128-bit output
TAG_BYTES_BY_MAC = {MAC_NONE: 0, MAC_BLAKE2B: TAG_BYTES}
PSEQ_LIMIT = 1 << 48            # pseq travels as 48 bits

# magic, version, kind, from, session, round, mac, 0, pseq's high 16 bits, its low 32 bits
HEADER = struct.Struct("!4sBBHIIBBHI")
DATA_TAIL = struct.Struct("!HH")
POLL_TAIL = struct.Struct("!HH")
CLOSE_TAIL = struct.Struct("!H")
STATUS_TAIL = struct.Struct("!HHBBHI")
TAILS = {DATA: DATA_TAIL, POLL: POLL_TAIL, STATUS: STATUS_TAIL, CLOSE: CLOSE_TAIL}

IP_UDP_BYTES = 28           # IPv4 + UDP headers, counted in pacing and wire bytes
MTU_BYTES = 1500
# Sized for a tagged datagram, so an option valid with auth on is valid with it off.
MAX_PAYLOAD_BYTES = (MTU_BYTES - IP_UDP_BYTES - HEADER.size - DATA_TAIL.size
                     - TAG_BYTES)                                           # 1428
MAX_COUNT = 8 * (MTU_BYTES - IP_UDP_BYTES - HEADER.size - STATUS_TAIL.size
                 - TAG_BYTES)   # a STATUS bitmap must fit one datagram     # 11360


@dataclasses.dataclass(frozen=True)
class Datagram:
    """One decoded datagram: the header's fields, the kind's tail, what follows it (``body``,
    the tag excluded), the bytes the tag covers (``signed``) and the tag (empty without)."""

    kind: int
    sender: int
    session: int
    round: int
    mac: int
    pseq: int
    tail: tuple[int, ...]
    body: memoryview
    signed: memoryview
    tag: memoryview


def decode(buf: memoryview) -> Datagram | None:
    """The datagram in ``buf``, or None if it is not one of ours (wrong magic, version, kind,
    MAC id or reserved byte, or too short for its kind and tag). Nothing is checked against a
    key here: session, tag, ranks and ranges are the caller's to check."""
    if len(buf) < HEADER.size:
        return None
    magic, version, kind, sender, session, round_, mac, zero, pseq_hi, pseq_lo = (
        HEADER.unpack_from(buf))
    if (magic != MAGIC or version != VERSION or kind not in TAILS or zero
            or mac not in TAG_BYTES_BY_MAC):
        return None
    tail = TAILS[kind]
    tag_bytes = TAG_BYTES_BY_MAC[mac]
    end = len(buf) - tag_bytes
    if end < HEADER.size + tail.size:
        return None
    return Datagram(kind, sender, session, round_, mac, pseq_hi << 32 | pseq_lo,
                    tail.unpack_from(buf, HEADER.size), buf[HEADER.size + tail.size:end],
                    buf[:end], buf[end:])


def header(kind: int, sender: int, session: int, round_: int, mac: int, pseq: int,
           *tail: int) -> bytes:
    """The header and the kind's tail: what comes before a datagram's body (and tag)."""
    return (HEADER.pack(MAGIC, VERSION, kind, sender, session, round_, mac, 0, pseq >> 32,
                        pseq & 0xFFFFFFFF) + TAILS[kind].pack(*tail))
