"""The delay line: a constant one-way delay at every host's ingress, so delay is a sweep dimension.

There is no netem on this kernel. Instead, each emulated host runs a small native helper,
``nfq-delay`` (``topologies/impair/delay/nfq_delay.c``), bound to an NFQUEUE queue in the host's own
network namespace, and one iptables rule sends every IPv4 packet arriving on ``<host>-eth0`` to
it (``raw`` table, ``PREROUTING``). The helper notes when each packet reached it and accepts it
``delay_ms`` later, in arrival order.

**What "delay" means.** ``delay_ms`` is the one-way delay added to every packet at the ingress of
the host that receives it, per direction. Every host-to-host path crosses exactly one such point,
so a worker's gradient to the PS and the PS's ACK back are each delayed once, and every round-trip
time grows by ``2 * delay_ms``, for data, parameters and ACKs alike. The delay comes *after* the
random loss of :mod:`topologies.impair.loss`: that runs at the interface's netdev ingress hook,
which the kernel passes before IP's ``PREROUTING``, so a packet dropped there is never delayed and
the loss counters are unchanged. Queueing at the bottleneck comes before both (it is on the
switch). The delay is added on top of the link's own few hundred microseconds of RTT; it does not
rate limit, so a delayed flow is still bounded by HTB at the link rate.

**Why iptables, and which.** nftables' own ``queue`` statement needs ``CONFIG_NFT_QUEUE``, which
this kernel lacks; iptables' ``NFQUEUE`` target is present. We call ``iptables-nft`` explicitly:
it loads the target through ``nft_compat`` into a ``table ip raw`` next to the impairment table,
it is Debian 12's default backend, and unlike ``iptables-legacy`` it does not depend on the
x_tables legacy interface that newer kernels make optional. ``--queue-bypass`` lets packets
through undelayed when no helper is bound, so a crashed helper cannot black-hole a host.

**Order.** :meth:`DelayLine.set` starts every helper first (each in its own process group,
recorded in the testbed's ledger, output to ``nfq-delay-<host>.log`` in the testbed's folder),
waits for each one's ``ready`` line, and only then installs the rules. :meth:`DelayLine.stop`
removes the rules first, then stops the helpers (SIGTERM to the group), which accept whatever
they still hold and print their counters as one JSON line, kept in :attr:`DelayLine.counters`.
Changing the value restarts the helpers; meant for between runs, since packets in flight during
the switch are released early.

**Accuracy and cost.** Each pass through a helper adds its own wake-ups on top of ``delay_ms``
(the wake on arrival, and a timer that fires late in a VM). Measured on the testbed (2 vCPUs,
median of 60 pings): a round trip grew by 2 x ``delay_ms`` plus 0.17 ms at 0.0001 ms, 0.3 ms at
0.5 ms, 0.5 ms at 1-10 ms and 0.7 ms at 50 ms; record the measured RTT with a run, not only the
setting.
The helper releases packets with a verdict system call in which the kernel runs the rest of the
receive path (and, for ACKs, the sender's next transmissions): about 30 us of CPU per packet, so
when CPU is short its wake-ups come late; its counters say how often (``late_1ms``,
``mean_late_us``). ``rt_priority`` (1-99) runs the helpers ``SCHED_FIFO``. On a busy machine it
cut the mean lateness under light traffic; on a quiet one it changed nothing, and under TCP load
on two cores it lets the helpers preempt the userspace switch without raising throughput, so it
is off by default.

Build the helper with ``make -C topologies/impair/delay`` (``./setup.sh`` does it). Use::

    with Testbed(params, folder) as tb, DelayLine(tb) as delay:
        delay.set(10.0)    # RTT between any two hosts + 20 ms
        ...
        delay.set(0)       # back to the bare network
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from pathlib import Path

from topologies.incast import intf
from topologies.lifecycle import wait_ready
from transports.base import UserError

DELAY_DIR = Path(__file__).resolve().parent / "delay"
BINARY = DELAY_DIR / "build" / "nfq-delay"


def c_define(source: Path, name: str, pattern: str) -> str:
    """A constant's text from a C source or header of the network's programs (C owns the
    values; Python reads them)."""
    found = re.search(rf"#define {name} +({pattern})", source.read_text())
    if found is None:
        raise RuntimeError(f"{source} defines no {name}.")
    return found.group(1)


MAX_DELAY_MS = float(c_define(DELAY_DIR / "nfq_delay.c", "ND_MAX_DELAY_MS", r"[\d.]+"))
# Every host has its own network namespace, hence its own queue numbering: one number fits all.
QUEUE_NUM = 7
IPTABLES = "iptables-nft"
READY_S = 10.0
RT_PRIORITY = 0
READY_LINE = "ready"


class DelayError(UserError, ValueError):
    """The delay line was given a bad value, or could not be set up or taken down."""


def check_delay(delay_ms: float) -> float:
    """Return ``delay_ms`` as a float, or raise :class:`DelayError` if it is not 0 to 1000 ms."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)):
        raise DelayError(f"delay_ms must be a number of milliseconds, not {delay_ms!r}.")
    if not (math.isfinite(delay_ms) and 0 <= delay_ms <= MAX_DELAY_MS):
        raise DelayError(f"delay_ms must be from 0 to {MAX_DELAY_MS:g} ms, not {delay_ms!r}.")
    return float(delay_ms)


def binary() -> Path:
    """The built ``nfq-delay`` helper; raise :class:`DelayError` if it has not been built."""
    if not BINARY.is_file():
        raise DelayError(f"the delay helper {BINARY} is missing; run ./setup.sh "
                         "(or make -C topologies/impair/delay).")
    return BINARY


def _check_whole(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DelayError(f"{name} must be a whole number from {low} to {high}, not {value!r}.")
    return value


def helper_argv(delay_ms: float, queue_num: int = QUEUE_NUM,
                rt_priority: int = RT_PRIORITY) -> list[str]:
    """The command line that runs the helper for ``delay_ms`` on ``queue_num`` (with
    ``rt_priority`` > 0, as a real-time process)."""
    _check_whole("queue_num", queue_num, 0, 65535)
    _check_whole("rt_priority", rt_priority, 0, 99)
    # repr() keeps every digit of a fractional delay (0.1 stays 0.1, not 0.100000).
    argv = [str(binary()), "--queue", str(queue_num), "--delay-ms", repr(check_delay(delay_ms))]
    return argv + (["--rt-priority", str(rt_priority)] if rt_priority else [])


def rule_args(intf: str, queue_num: int = QUEUE_NUM, action: str = "-A") -> list[str]:
    """The iptables command that adds (``-A``), checks (``-C``) or deletes (``-D``) the rule
    sending IPv4 packets arriving on ``intf`` to ``queue_num``."""
    if action not in ("-A", "-C", "-D"):
        raise DelayError(f"action must be -A, -C or -D, not {action!r}.")
    return [IPTABLES, "-w", "-t", "raw", action, "PREROUTING", "-i", intf,
            "-j", "NFQUEUE", "--queue-num", str(queue_num), "--queue-bypass"]


def parse_counters(log_text: str) -> dict | None:
    """The counters the helper printed when it stopped (its last JSON line), or None."""
    for line in reversed(log_text.splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return None


def _tail(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


class DelayLine:
    """A one-way delay at every host's ingress of a running testbed; see the module docstring.

    ``testbed`` needs ``host_names()``, ``host_run(host, *args)``, ``start_process(host, argv,
    log_path)`` and ``folder`` (a :class:`topologies.testbed.network.Testbed` has them).
    ``queue_num`` is the NFQUEUE queue in every host's namespace; ``rt_priority`` (0 = off) makes
    the helpers real-time; ``ready_s`` bounds the wait for each helper's ``ready`` line.
    """

    def __init__(self, testbed, *, queue_num: int = QUEUE_NUM, rt_priority: int = RT_PRIORITY,
                 ready_s: float = READY_S) -> None:
        self.testbed = testbed
        self.queue_num = queue_num
        self.rt_priority = rt_priority
        self.ready_s = ready_s
        self.counters: dict[str, dict | None] = {}
        """Per host, the counters its helper printed when last stopped."""
        self._delays: dict[str, float] = {}  # host -> one-way delay applied there
        self._procs: dict[str, tuple[object, int]] = {}  # host -> (HostProcess, log offset)
        self._rules: list[str] = []  # hosts whose rule is installed

    @property
    def delay_ms(self) -> float:
        """The largest one-way delay now applied at any host's ingress (0 when off); with one
        value for every host, that value."""
        return max(self._delays.values(), default=0.0)

    @property
    def delays_ms(self) -> dict[str, float]:
        """The one-way delay now applied at each host's ingress (hosts without one: absent)."""
        return {h: d for h, d in self._delays.items() if d}

    def log_path(self, host: str) -> Path:
        """Where the helper on ``host`` writes (appended to across restarts)."""
        return Path(self.testbed.folder) / f"nfq-delay-{host}.log"

    def set(self, delay_ms: float) -> None:
        """Delay every packet by ``delay_ms`` at its receiving host's ingress (0 turns it off)."""
        self.set_hosts({host: delay_ms for host in self.testbed.host_names()})

    def set_hosts(self, delays_ms: dict[str, float]) -> None:
        """Delay packets arriving at each named host by its value (0 turns it off there);
        hosts not named keep theirs. If any named host changes (or its helper died), the
        helpers of all named hosts restart."""
        delays = {host: check_delay(d) for host, d in delays_ms.items()}
        running = {h: h in self._procs and self._procs[h][0].poll() is None for h in delays}
        if all(d == self._delays.get(h, 0.0) and (d == 0 or running[h])
               for h, d in delays.items()):
            return  # unchanged and healthy; a helper that died is restarted below
        # Checked before anything stops, so a bad setting leaves the running delay as it was.
        argvs = {h: helper_argv(d, self.queue_num, self.rt_priority) for h, d in delays.items()
                 if d}
        self.stop(list(delays))
        if not argvs:
            return
        try:
            started = []
            for host, argv in argvs.items():
                log = self.log_path(host)
                offset = log.stat().st_size if log.exists() else 0
                proc = self.testbed.start_process(host, argv, log)
                self._procs[host] = (proc, offset)
                started.append(host)
            for host in started:
                self._wait_ready(host)
            for host in started:
                self.testbed.host_run(host, *rule_args(intf(host), self.queue_num, "-A"))
                self._rules.append(host)
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop(list(delays))
            raise
        self._delays.update(delays)

    def stop(self, hosts: list[str] | None = None) -> None:
        """Remove the rules of ``hosts`` (default: all), then stop their helpers; safe to call
        again. Raise :class:`DelayError` afterwards if a rule could not be removed."""
        chosen = set(self._delays) | set(self._procs) | set(self._rules) if hosts is None \
            else set(hosts)
        failed = []
        try:
            for host in [h for h in reversed(self._rules) if h in chosen]:
                self._rules.remove(host)
                try:
                    self.testbed.host_run(host, *rule_args(intf(host), self.queue_num, "-D"))
                except Exception as exc:  # noqa: BLE001 (the helpers must still be stopped)
                    failed.append(f"{host}: {exc}")
        finally:
            for host in [h for h in reversed(list(self._procs)) if h in chosen]:
                proc, offset = self._procs.pop(host)
                proc.kill()
                with contextlib.suppress(OSError):
                    self.counters[host] = parse_counters(_tail(self.log_path(host), offset))
            for host in chosen:
                self._delays.pop(host, None)
        if failed:
            raise DelayError(f"could not remove the delay rule on {'; '.join(failed)}.")

    def _wait_ready(self, host: str) -> None:
        proc, offset = self._procs[host]
        log = self.log_path(host)

        def lines() -> list[str]:
            return _tail(log, offset).strip().splitlines() if log.exists() else []

        wait_ready(proc, lambda: READY_LINE in lines(), time.monotonic() + self.ready_s, 0.005,
                   lambda: DelayError(f"nfq-delay on {host} exited before it was ready "
                                      f"({(lines()[-1:] or ['no output'])[0]}); "
                                      f"see {log}."),
                   lambda: DelayError(f"nfq-delay on {host} was not ready within "
                                      f"{self.ready_s:g} s; see {log}."))

    def __enter__(self) -> DelayLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
