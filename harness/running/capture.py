"""Packet captures of a run's hosts: ``invoke run-sweep --capture ps1,w1``.

A capture is a sweep-level setting, not a run parameter: it changes no run id, and a resumed
sweep may capture or not. For each named host, :func:`capturing` starts ``tcpdump`` inside the
host's network namespace on its one interface (``<host>-eth0``), in its own process group and
recorded in the testbed's ledger like every host process (:meth:`Testbed.start_process`), waits
for its "listening on" line, and kills it by group when the run ends (SIGTERM first, so tcpdump
closes the file and writes its own counts to the log). It starts before the run's first counter
snapshot and stops after the last, so the file holds at least what the counters count.

What a capture holds, and its bounds (our interpretation; the options say how to change them):

- every frame the host's interface received or sent, seen where the kernel's packet taps see
  it: a received packet *before* the emulated loss and delay at the host's ingress (a packet the
  loss model dropped is in the capture), a sent one after the host's own shaping;
- each frame cut to ``snaplen_bytes`` (default 128: Ethernet, IPv4 and UDP or TCP headers and
  the transport's own header, LTP's DATA header included; the gradients' payload is of no use in
  a capture), with its original length kept in the record;
- at most ``max_mb`` MB per host and run (default 200): tcpdump stops after
  ``max_packets`` packets (``-c``), the number of records of ``snaplen_bytes`` that fit. The
  file then holds the run's first packets, complete, rather than a ring of its last ones.

tcpdump is one of the run's own processes (a child of the harness), so
:class:`harness.running.provenance.LoadMeter` counts its CPU as the run's, not as other load; it
costs CPU on the same cores as the hosts, so a run with a capture is not quite the run without.

The files are ``runs/<run_id>/capture/<host>.pcap`` with tcpdump's messages in
``capture/<host>.log`` (:class:`harness.running.runfiles.RunFiles`); docs/reading-a-capture.md
explains how to read them. The sweep's manifest records which runs have captures
(:func:`note`), so its report can list them without looking at the uncommitted run folders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.running.runfiles import RunFiles
from topologies.lifecycle import wait_ready
from transports.base import UserError

DEFAULT_SNAPLEN_BYTES = 128
DEFAULT_MAX_MB = 200.0
# pcap's file header, and the header of each record (timestamp, captured and original length)
PCAP_FILE_HEADER_BYTES = 24
PCAP_RECORD_HEADER_BYTES = 16
# Ethernet + IPv4 + TCP with options: a shorter cut would lose the transport's own header.
MIN_SNAPLEN_BYTES = 64
MAX_SNAPLEN_BYTES = 65535
# tcpdump's kernel buffer (KiB): a burst of an incast must not overflow it before tcpdump reads.
BUFFER_KIB = 8192
READY_S = 15.0
READY_LINE = "listening on"


class CaptureError(UserError, ValueError):
    """A capture setting cannot be used."""


@dataclasses.dataclass(frozen=True)
class Capture:
    """Which hosts to capture in every run of a sweep, and each capture's bounds."""

    hosts: tuple[str, ...]
    snaplen_bytes: int = DEFAULT_SNAPLEN_BYTES
    max_mb: float = DEFAULT_MAX_MB

    def __post_init__(self) -> None:
        if not self.hosts:
            raise CaptureError("--capture needs at least one host name, e.g. ps1 or ps1,w1.")
        if len(set(self.hosts)) != len(self.hosts):
            raise CaptureError(f"--capture names a host more than once: {','.join(self.hosts)}.")
        if not MIN_SNAPLEN_BYTES <= self.snaplen_bytes <= MAX_SNAPLEN_BYTES:
            raise CaptureError(f"--capture-snaplen must be from {MIN_SNAPLEN_BYTES} to "
                               f"{MAX_SNAPLEN_BYTES} bytes, not {self.snaplen_bytes}.")
        if not (self.max_mb > 0 and self.max_packets >= 1):
            raise CaptureError(f"--capture-mb must leave room for at least one packet, not "
                               f"{self.max_mb:g}.")

    @property
    def max_packets(self) -> int:
        """Packets per host and run (tcpdump's ``-c``) that keep a file within ``max_mb``."""
        room = self.max_mb * 1e6 - PCAP_FILE_HEADER_BYTES
        return max(0, int(room // (self.snaplen_bytes + PCAP_RECORD_HEADER_BYTES)))

    def as_dict(self) -> dict:
        """JSON-ready, as the manifest records it."""
        return {"hosts": list(self.hosts), "snaplen_bytes": self.snaplen_bytes,
                "max_mb": self.max_mb}

    def check_hosts(self, host_names: Sequence[str], what: str) -> None:
        """Raise :class:`CaptureError` unless every host to capture is one of ``host_names``
        (those of ``what``, e.g. a run id)."""
        unknown = [h for h in self.hosts if h not in host_names]
        if unknown:
            raise CaptureError(f"--capture {unknown[0]}: {what} has no such host; its hosts "
                               f"are {', '.join(host_names)}.")


def parse_capture(hosts: str | None, snaplen: int | None = None,
                  max_mb: float | None = None) -> Capture | None:
    """``"ps1,w1"`` and the bounds -> :class:`Capture`; ``None`` (no ``--capture``) -> ``None``,
    and then bounds given alone are refused."""
    if hosts is None:
        if snaplen is not None or max_mb is not None:
            raise CaptureError("--capture-snaplen and --capture-mb bound a capture; name the "
                               "hosts to capture with --capture.")
        return None
    names = tuple(h.strip() for h in str(hosts).split(",") if h.strip())
    return Capture(names, DEFAULT_SNAPLEN_BYTES if snaplen is None else snaplen,
                   DEFAULT_MAX_MB if max_mb is None else max_mb)


def tcpdump_argv(intf: str, pcap: Path, capture: Capture) -> list[str]:
    """tcpdump's command line for one host's interface ``intf`` into ``pcap``."""
    return ["tcpdump", "-i", intf, "-w", str(pcap), "-s", str(capture.snaplen_bytes),
            "-c", str(capture.max_packets),
            "-n",                   # no name lookups: nothing resolves inside the testbed
            "-U",                   # each packet written as it comes: a killed capture is whole
            "--immediate-mode",     # no packets left in a half-full kernel block at the end
            "-B", str(BUFFER_KIB),
            "-Z", "root"]           # the run folder stays root's (Debian drops to `tcpdump`)


def _wait_ready(proc, log: Path, deadline: float) -> None:
    def text() -> str:
        with contextlib.suppress(FileNotFoundError):
            return log.read_text(errors="replace")
        return ""

    wait_ready(proc, lambda: READY_LINE in text(), deadline, 0.02,
               lambda: CaptureError(f"tcpdump on {proc.host} exited at start: "
                                    f"{text().strip()[-300:]}"),
               lambda: CaptureError(f"tcpdump on {proc.host} did not start listening within "
                                    f"{READY_S:g} s; see {log}."))


@contextlib.contextmanager
def capturing(testbed, capture: Capture | None, files: RunFiles) -> Iterator[dict]:
    """Capture ``capture.hosts`` on ``testbed`` into ``files.capture`` while the block runs;
    yield ``{host: HostProcess}`` (empty without a capture). Every tcpdump is killed by group
    when the block ends, also on errors and interruptions."""
    from topologies.incast import intf

    procs: dict = {}
    if capture is None:
        yield procs
        return
    capture.check_hosts(testbed.host_names(), "this network")
    files.capture.mkdir(parents=True, exist_ok=True)
    try:
        for host in capture.hosts:
            log = files.capture_log(host)
            procs[host] = testbed.start_process(
                host, tcpdump_argv(intf(host), files.pcap(host), capture), log)
        deadline = time.monotonic() + READY_S
        for host, proc in procs.items():
            _wait_ready(proc, files.capture_log(host), deadline)
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()


# ---- what a sweep's manifest says about its captures -------------------------------------------


def note(folder: Path, run_id: str, capture: Capture | None) -> None:
    """Record in ``folder/manifest.json`` that run ``run_id`` has a capture now (or, run again
    without one, no longer has one); nothing happens without a manifest or a change."""
    path = Path(folder) / "manifest.json"
    if not path.exists():
        return
    manifest = json.loads(path.read_text())
    captures = manifest.get("captures", {})
    if capture is None and run_id not in captures:
        return
    if capture is None:
        del captures[run_id]
    else:
        captures[run_id] = capture.as_dict()
    manifest["captures"] = captures
    tmp = path.with_name(path.name + ".capture")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, path)


def noted(folder: Path) -> dict[str, dict]:
    """``run_id -> {"hosts", "snaplen_bytes", "max_mb"}`` of the runs of ``folder`` with a
    capture, from its manifest."""
    path = Path(folder) / "manifest.json"
    if not path.exists():
        return {}
    return dict(json.loads(path.read_text()).get("captures", {}))


# ---- reading a capture -------------------------------------------------------------------------


def pcap_records(data: bytes) -> list[tuple[int, bytes]]:
    """The records of a classic pcap file (tcpdump's ``-w``): ``(original length, captured
    bytes)`` each; a record cut short by a killed writer is left out. Raises
    :class:`CaptureError` on another format (pcapng: read it with tshark)."""
    if len(data) < PCAP_FILE_HEADER_BYTES:
        raise CaptureError("this is no pcap file: it is shorter than a pcap header.")
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",
              b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
    if endian is None:
        raise CaptureError("this is no classic pcap file (pcapng? read it with tshark -r).")
    out, at = [], PCAP_FILE_HEADER_BYTES
    while at + PCAP_RECORD_HEADER_BYTES <= len(data):
        _, _, caplen, length = struct.unpack_from(endian + "IIII", data, at)
        at += PCAP_RECORD_HEADER_BYTES
        if at + caplen > len(data):
            break
        out.append((length, data[at:at + caplen]))
        at += caplen
    return out
