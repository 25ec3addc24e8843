"""Reading a capture's datagrams with the project's Wireshark dissector.

The dissector (``transports/wireshark/ltp.lua``) names every field of the native core's datagrams
(``ltpt.*``: LTP, PLOT and the schemes built on the core) and of the peer multicast transport's
(``ltpp.*``). Wireshark ships another protocol under the name ``ltp`` (the Licklider Transmission
Protocol, RFC 5326), so ours is ``ltpt``. This module runs ``tshark`` with the plugin loaded and
returns what it printed as a table, one row per datagram: the labs' checker and the tests read
captures through it, and docs/reading-a-capture.md shows the same commands by hand.

Debian 12's Wireshark (4.0) loads Lua plugins for root because its ``init.lua`` sets
``run_user_scripts_when_superuser``; a build that refuses them as root reads the same pcap as an
ordinary user (tcpdump writes the files readable by everyone).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from transports.base import UserError

PROJECT = Path(__file__).resolve().parents[2]
PLUGIN = PROJECT / "transports" / "wireshark" / "ltp.lua"
# One row per datagram of the core: who sent it to whom, and the fields a lab asks about.
CORE_FIELDS = ("frame.number", "frame.time_relative", "ip.src", "ip.dst", "ltpt.type",
               "ltpt.flags", "ltpt.sender", "ltpt.msg_id", "ltpt.segment", "ltpt.index",
               "ltpt.count", "ltpt.tx_seq", "ltpt.received", "ltpt.close.reason",
               "ltpt.close.count", "ltpt.ack.base", "ltpt.ack.rate_hint", "ltpt.open_back")
MCAST_FIELDS = ("frame.number", "frame.time_relative", "ip.src", "ip.dst", "ltpp.kind",
                "ltpp.sender", "ltpp.round", "ltpp.seq", "ltpp.count", "ltpp.pass",
                "ltpp.target", "ltpp.status_flags", "ltpp.have_floats")
# Frames the dissector could not read, or read as something no peer would accept.
PROBLEMS = "_ws.malformed || _ws.expert.severity == error || ltpt.bad || ltpp.bad"
TIMEOUT_S = 600


def tshark() -> str:
    """The tshark program, or a :class:`UserError` saying how to get it."""
    found = shutil.which("tshark")
    if found is None:
        raise UserError("tshark is not installed: run ./setup.sh (Debian package tshark).")
    return found


def _run(pcap: Path, args: Sequence[str]) -> str:
    if not Path(pcap).is_file():
        raise UserError(f"{pcap}: no such capture file.")
    done = subprocess.run([tshark(), "-n", "-X", f"lua_script:{PLUGIN}", "-r", str(pcap), *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no message"]
        raise UserError(f"tshark could not read {pcap}: {tail[0]}")
    return done.stdout


def dissect(pcap: Path, fields: Sequence[str] = CORE_FIELDS, display: str = "ltpt") -> pd.DataFrame:
    """The datagrams of ``pcap`` that match the display filter ``display``, one row each, with
    the columns ``fields`` (numbers as numbers; a field a datagram lacks is empty)."""
    out = _run(pcap, ["-Y", display, "-T", "fields", "-E", "header=y", "-E", "separator=\t",
                      "-E", "occurrence=f", *[a for name in fields for a in ("-e", name)]])
    table = pd.read_csv(io.StringIO(out), sep="\t", dtype=str, keep_default_na=False)
    for name in table.columns:
        if name in ("ip.src", "ip.dst"):
            continue
        base = 16 if name.endswith("flags") else 10
        table[name] = [_number(v, base) for v in table[name]]
    return table


def _number(text: str, base: int) -> float | int | None:
    if text == "":
        return None
    if "." in text:
        return float(text)
    return int(text, 0 if text.startswith("0x") else base)


def count(pcap: Path, display: str) -> int:
    """How many frames of ``pcap`` match the display filter ``display``."""
    return len([line for line in _run(pcap, ["-Y", display, "-T", "fields", "-e",
                                             "frame.number"]).splitlines() if line.strip()])


def problems(pcap: Path) -> int:
    """Frames the dissector marks malformed or in error (0 on any capture of a real run)."""
    return count(pcap, PROBLEMS)


def distinct_closes(frames, src: str) -> pd.DataFrame:
    """The closes host ``src`` sent in the rows of :func:`dissect`, one row per message it
    closed: a receiver sends each CLOSE more than once (``close_copies``, and again to a sender
    that missed it), while its counters count each message once."""
    closes = frames[(frames["ip.src"] == src) & (frames["ltpt.type"] == 3)]
    return closes.drop_duplicates(["ip.dst", "ltpt.msg_id", "ltpt.segment"])
