"""Background cross traffic through the bottleneck: its text form, and a context manager to run it.

Cross traffic comes from extra hosts on the switch, ``x1..xK`` (:class:`~topologies.incast.
IncastTopo` with ``n_cross = K``), and goes to the PS, so it crosses the same bottleneck port as
the gradients. Two kinds, each flow from a host of its own, in the order written:

- ``tcp:N``: N bulk TCP flows (iperf3, CUBIC unless ``cc=``), each from its own cross host to an
  iperf3 server of its own on the PS, sending for as long as the traffic runs;
- ``udp:N:rate=50,on=50ms,off=150ms``: N on/off UDP generators (:mod:`topologies.impair.onoff`): on
  for ``on`` at ``rate`` Mbit/s, then off for ``off``, each to a counting sink of its own on the
  PS; ``dist=exp`` draws every period's length from an exponential distribution with that mean
  (default ``const``: fixed lengths, random first phase); ``size`` is the datagram payload in bytes
  (default 1400). Durations take ``ms`` or ``s`` (a bare number is milliseconds).

Kinds combine with ``+``: ``tcp:2+udp:1:rate=30,on=20ms,off=80ms``; ``none`` is no cross
traffic. :func:`parse_cross` reads the text and raises :class:`CrossError` with one sentence.

:class:`CrossTraffic` starts it (servers and sinks first, each waited for by its listening or
bound socket, then the senders, each waited for by its connection or bound socket; never by
sleeping), and stops it on leaving, also on errors: every process runs in its own process group,
recorded in the testbed's ledger, killed by group in ``finally``. Their output and reports go to
the folder it is given (``cross-<host>.json``, ``cross-sink-<port>.json``), and
:attr:`CrossTraffic.report` sums them up. What the switch carried for them during a run comes
from its per-port counters: ``cross_tx_bytes`` of a :class:`~topologies.counters.Delta`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import time
from pathlib import Path

from topologies.incast import PS_IP, PS_NAME, cross_ip, cross_name
from transports.base import UserError

TCP_BASE_PORT = 6100   # iperf3 server of cross flow i listens on TCP_BASE_PORT + i
UDP_BASE_PORT = 6200   # the sink of generator i binds UDP_BASE_PORT + i; it sends from the same
READY_S = 10.0
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
RUN_FOR_S = 86400      # iperf3 clients run "for ever": they are killed when the traffic stops


class CrossError(UserError, ValueError):
    """Cross traffic was given a bad text, or could not be started."""


@dataclasses.dataclass(frozen=True)
class TcpFlows:
    """``count`` bulk TCP flows with congestion control ``cc``."""

    count: int
    cc: str = "cubic"

    def text(self) -> str:
        """The canonical text form."""
        return f"tcp:{self.count}" + (f":cc={self.cc}" if self.cc != "cubic" else "")


@dataclasses.dataclass(frozen=True)
class OnOffUdp:
    """``count`` on/off UDP generators (see the module docstring)."""

    count: int
    rate_mbps: float = 50.0
    on_ms: float = 50.0
    off_ms: float = 150.0
    size_bytes: int = 1400
    dist: str = "const"

    def text(self) -> str:
        """The canonical text form."""
        extra = (f",size={self.size_bytes}" if self.size_bytes != 1400 else "") + \
            (f",dist={self.dist}" if self.dist != "const" else "")
        return (f"udp:{self.count}:rate={self.rate_mbps:g},on={self.on_ms:g}ms,"
                f"off={self.off_ms:g}ms{extra}")


@dataclasses.dataclass(frozen=True)
class CrossSpec:
    """A combination of cross-traffic kinds; empty is no cross traffic."""

    parts: tuple[TcpFlows | OnOffUdp, ...] = ()

    @property
    def n_hosts(self) -> int:
        """How many cross hosts it needs (one per flow or generator)."""
        return sum(p.count for p in self.parts)

    def text(self) -> str:
        """The canonical text form (``none`` when empty)."""
        return "+".join(p.text() for p in self.parts) or "none"

    def flows(self) -> list[tuple[int, TcpFlows | OnOffUdp, int]]:
        """(cross host index, kind, index among flows of that kind), in host order."""
        out, n_tcp, n_udp = [], 0, 0
        for part in self.parts:
            for _ in range(part.count):
                if isinstance(part, TcpFlows):
                    out.append((len(out), part, n_tcp))
                    n_tcp += 1
                else:
                    out.append((len(out), part, n_udp))
                    n_udp += 1
        return out


def _duration_ms(value: str, key: str, whole: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+(?:e-?\d+)?)\s*(ms|s)?\s*", value)
    if not m:
        raise CrossError(f"{whole!r}: {key} must be a duration like 50ms or 0.2s, not {value!r}.")
    ms = float(m.group(1)) * (1000 if m.group(2) == "s" else 1)
    if not (math.isfinite(ms) and 0 < ms <= 3_600_000):
        raise CrossError(f"{whole!r}: {key} must be above 0 and at most an hour, not {value!r}.")
    return ms


def _part(item: str, whole: str) -> TcpFlows | OnOffUdp:
    kind, _, rest = item.partition(":")
    count_text, _, options = rest.partition(":")
    kind = kind.strip().lower()
    if kind not in ("tcp", "udp"):
        raise CrossError(f"{whole!r}: {kind or item!r} is not a cross-traffic kind; write none, "
                         "tcp:N or udp:N:rate=MBIT,on=MS,off=MS, joined by +.")
    if not re.fullmatch(r"\s*[1-9]\d*\s*", count_text):
        raise CrossError(f"{whole!r}: write how many {kind} flows as a whole number of at least 1 "
                         f"after '{kind}:', not {count_text!r}.")
    count = int(count_text)
    opts: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in re.split(r"[,:]", options))):
        key, eq, value = (s.strip() for s in pair.partition("="))
        if not eq or not value:
            raise CrossError(f"{whole!r}: write options as name=value, not {pair!r}.")
        if key in opts:
            raise CrossError(f"{whole!r}: {key} is given twice.")
        opts[key] = value
    allowed = {"tcp": {"cc"}, "udp": {"rate", "on", "off", "size", "dist"}}[kind]
    unknown = sorted(set(opts) - allowed)
    if unknown:
        raise CrossError(f"{whole!r}: {kind} takes {', '.join(sorted(allowed))}, "
                         f"not {unknown[0]}.")
    if kind == "tcp":
        cc = opts.get("cc", "cubic")
        if cc not in CONGESTION_CONTROLS:
            raise CrossError(f"{whole!r}: cc must be one of {', '.join(CONGESTION_CONTROLS)}, "
                             f"not {cc!r}.")
        return TcpFlows(count, cc)
    try:
        rate = float(opts.get("rate", "50"))
    except ValueError:
        rate = float("nan")
    if not (math.isfinite(rate) and 0 < rate <= 1000):
        raise CrossError(f"{whole!r}: rate must be above 0 and at most 1000 Mbit/s, "
                         f"not {opts.get('rate')!r}.")
    size = opts.get("size", "1400")
    if not re.fullmatch(r"\d+", size) or not 1 <= int(size) <= 1472:
        raise CrossError(f"{whole!r}: size must be a whole number of bytes from 1 to 1472 "
                         f"(one unfragmented datagram), not {size!r}.")
    dist = opts.get("dist", "const")
    if dist not in ("const", "exp"):
        raise CrossError(f"{whole!r}: dist must be const or exp, not {dist!r}.")
    return OnOffUdp(count, rate, _duration_ms(opts.get("on", "50ms"), "on", whole),
                    _duration_ms(opts.get("off", "150ms"), "off", whole), int(size), dist)


def parse_cross(text: str | None) -> CrossSpec:
    """A :class:`CrossSpec` from its text form (see the module docstring)."""
    whole = "none" if text is None else str(text).strip()
    if whole.lower() in ("none", ""):
        return CrossSpec()
    return CrossSpec(tuple(_part(item, whole) for item in whole.split("+")))


def _listening(host_pid: int, proto: str, port: int, state: str) -> bool:
    """True if a socket on local ``port`` is in ``state`` (hex, as /proc shows it) in the
    network namespace of process ``host_pid``."""
    want = f":{port:04X}"
    with open(f"/proc/{host_pid}/net/{proto}") as f:
        return any(line.split()[1].endswith(want) and line.split()[3] == state
                   for line in f.readlines()[1:])


def _connected_to(host_pid: int, port: int) -> bool:
    """True if a TCP connection to remote ``port`` is established in that namespace."""
    want = f":{port:04X}"
    with open(f"/proc/{host_pid}/net/tcp") as f:
        return any(line.split()[2].endswith(want) and line.split()[3] == "01"
                   for line in f.readlines()[1:])


TCP_LISTEN, TCP_ESTABLISHED, UDP_BOUND = "0A", "01", "07"


class CrossTraffic:
    """Runs ``spec`` on a live ``testbed`` while the ``with`` block lasts; see the module docstring.

    ``folder`` receives the processes' output and reports; ``seed`` seeds the UDP generators
    (generator i gets ``seed * 1000 + i``).
    """

    def __init__(self, testbed, spec: CrossSpec | str, folder: Path, seed: int = 0,
                 ready_s: float = READY_S) -> None:
        self.testbed = testbed
        self.spec = spec if isinstance(spec, CrossSpec) else parse_cross(spec)
        self.folder = Path(folder)
        self.seed = seed
        self.ready_s = ready_s
        self.report: dict = {}
        """After leaving: per cross host, what its generator or iperf3 reported."""
        self._procs: list = []

    def __enter__(self) -> CrossTraffic:
        have = len(self.testbed.params.cross_names)
        if self.spec.n_hosts > have:
            raise CrossError(f"cross traffic {self.spec.text()} needs {self.spec.n_hosts} cross "
                             f"hosts but the network has {have}; build it with "
                             f"n_cross={self.spec.n_hosts}.")
        if not self.spec.parts:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _start(self) -> None:
        tb = self.testbed
        ps_pid = tb.host(PS_NAME).pid
        flows = self.spec.flows()
        waits = []
        for _, kind, i in flows:  # the receiving ends first
            if isinstance(kind, TcpFlows):
                port = TCP_BASE_PORT + i
                argv = ["iperf3", "-s", "-1", "-B", PS_IP, "-p", str(port)]
                waits.append((ps_pid, "tcp", port, TCP_LISTEN))
            else:
                port = UDP_BASE_PORT + i
                argv = [sys.executable, "-m", "topologies.impair.onoff", "sink", "--bind", PS_IP,
                        "--port", str(port), "--report",
                        str(self.folder / f"cross-sink-{port}.json")]
                waits.append((ps_pid, "udp", port, UDP_BOUND))
            self._procs.append(tb.start_process(PS_NAME, argv,
                                                self.folder / f"cross-server-{port}.log"))
        self._wait(waits)
        waits = []
        for index, kind, i in flows:
            host = cross_name(index)
            pid = tb.host(host).pid
            if isinstance(kind, TcpFlows):
                port = TCP_BASE_PORT + i
                argv = ["iperf3", "-c", PS_IP, "-B", cross_ip(index), "-p", str(port),
                        "-t", str(RUN_FOR_S), "-C", kind.cc, "-J"]
                waits.append((pid, "tcp-to", port, TCP_ESTABLISHED))
            else:
                port = UDP_BASE_PORT + i
                argv = [sys.executable, "-m", "topologies.impair.onoff", "send", "--dst", PS_IP,
                        "--port", str(port), "--src-port", str(port),
                        "--rate-mbps", repr(kind.rate_mbps), "--on-ms", repr(kind.on_ms),
                        "--off-ms", repr(kind.off_ms), "--size", str(kind.size_bytes),
                        "--dist", kind.dist, "--seed", str(self.seed * 1000 + i),
                        "--report", str(self.folder / f"cross-{host}.json")]
                waits.append((pid, "udp", port, UDP_BOUND))
            log = self.folder / (f"cross-{host}.json" if isinstance(kind, TcpFlows)
                                 else f"cross-{host}.log")
            self._procs.append(tb.start_process(host, argv, log))
        self._wait(waits)

    def _wait(self, waits: list[tuple[int, str, int, str]]) -> None:
        deadline = time.monotonic() + self.ready_s
        pending = list(waits)
        while pending:
            pending = [w for w in pending if not (
                _connected_to(w[0], w[2]) if w[1] == "tcp-to" else _listening(*w))]
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                raise CrossError(f"cross traffic on {dead[0].host} exited at start; "
                                 f"see {dead[0].log_path}.")
            if pending and time.monotonic() > deadline:
                raise CrossError(f"cross traffic was not up within {self.ready_s:g} s "
                                 f"(port {pending[0][2]}); see {self.folder}.")
            if pending:
                time.sleep(0.01)

    def _stop(self) -> None:
        try:
            # Senders first (they were started last), so sinks count what is still in flight.
            for proc in reversed(self._procs):
                proc.kill()
        finally:
            self._procs = []
        self.report = self._read_reports()

    def _read_reports(self) -> dict:
        out = {}
        for index, kind, _ in self.spec.flows():
            host = cross_name(index)
            path = self.folder / f"cross-{host}.json"
            try:
                text = path.read_text()
            except OSError:
                continue
            if isinstance(kind, TcpFlows):
                # iperf3 killed mid-run may leave no or partial JSON; what it has is kept.
                try:
                    sent = json.loads(text)["end"]["sum_sent"]["bytes"]
                except (ValueError, KeyError, TypeError):
                    sent = None
                out[host] = {"kind": "tcp", "sent_bytes": sent}
            else:
                with_report = json.loads(text) if text.strip() else {}
                out[host] = {"kind": "udp", **with_report}
        return out
