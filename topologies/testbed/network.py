"""The network lifecycle: bring up the incast testbed, measure it, and always take it down.

:class:`Testbed` is a context manager. Entering it

1. reclaims anything a previous testbed left behind after being killed outright (its ledger),
2. raises ``net.core.wmem_default`` and ``rmem_default`` and starts a private userspace Open vSwitch
   (:mod:`topologies.testbed.ovs`),
3. starts the os-ken controller (:mod:`topologies.controller.controller_app`) on 127.0.0.1 and
   waits until it listens,
4. builds the Mininet network from :class:`~topologies.incast.IncastTopo` (HTB-shaped links,
   offload off, static ARP), sets the bottleneck pfifo on the switch port toward the PS, applies
   the topology's uniform loss (:mod:`topologies.impair.loss`), and polls the switch until the
   controller's flows are installed.

The topology comes from the parameters (``params.topo()``): the incast star
(:class:`~topologies.incast.IncastParams`) or the leaf-spine fabric
(:class:`~topologies.fabric.FabricParams`). A topology gives the controller one forwarding table
per switch (``switch_tables()``) and names the switch ports that get the pfifo (``queue_intfs()``);
one that also describes its wiring (``wiring()``, the fabric) gets the controller's multicast app
(:mod:`topologies.controller.mcast_app`) next to the forwarding app, and the testbed a client for
it, :attr:`Testbed.mcast`.

Leaving it, also on Ctrl-C, SIGTERM and errors, removes exactly what it created, recorded in a
ledger on disk (:mod:`topologies.testbed.ledger`) as it went. It never runs ``mn -c`` or
``mininet.clean.cleanup()``, which kill and delete machine-wide by name.

While it is up, the testbed runs processes on hosts and two objects do the rest:

- :attr:`Testbed.ingress` (:class:`~topologies.impair.ingress.Ingress`) applies an
  :class:`~topologies.impair.loss.Impairment` (a loss model and a one-way delay) to every host or
  to named hosts, in place, so consecutive runs can share one network;
- :attr:`Testbed.meter` (:class:`~topologies.testbed.measure.Meter`) reads every counter a run
  needs as a typed :class:`~topologies.testbed.counters.Snapshot` (``after.delta(before)`` gives a
  run's figures), RTTs to the PS and the controller's port statistics; the names it reads (the
  PS, the switch, the bottleneck port) come from the topology's parameters;
- :attr:`Testbed.queue` (:class:`~topologies.testbed.bottleneck.BottleneckQueue`) gives the
  bottleneck the plain FIFO or the priority bands a transport asks for, per run;
- :meth:`Testbed.start_process` runs a program inside a host, in its own process group,
  recorded for cleanup (a :class:`~topologies.testbed.process.HostProcess`);
  :meth:`Testbed.host_run` and :meth:`Testbed.reset_routes` set up hosts.

Cross traffic through the bottleneck is its own context manager on top of a testbed
(:mod:`topologies.impair.cross`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mininet.link import TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch, RemoteController

from topologies.controller.control import ControllerClient
from topologies.controller.multicast import MulticastClient
from topologies.impair.ingress import Ingress
from topologies.impair.loss import Impairment
from topologies.incast import IncastParams, intf
from topologies.lifecycle import UpDown
from topologies.testbed import ovs
from topologies.testbed.bottleneck import BottleneckQueue
from topologies.testbed.ledger import (Ledger, ProcessRef, link_exists, read_sysctl, reclaim,
                                       write_sysctl)
from topologies.testbed.measure import Meter
from topologies.testbed.process import HostProcess, TestbedError, run

if TYPE_CHECKING:
    from topologies.fabric import FabricParams

PROJECT_DIR = Path(__file__).resolve().parents[2]
STATE_DIR = Path(os.environ.get("LTP_STATE_DIR", PROJECT_DIR / ".state"))
# Userspace OVS moves every packet through sockets sized by these defaults: its transmit socket
# drops silently past ~90 queued packets, and its per-port receive sockets overflow (a single
# TCP flow then reaches ~75 % of a 100 Mbit/s link instead of ~94 %). Both are raised before
# ovs-vswitchd starts and restored afterwards.
OVS_SOCKET_BUFFERS = {"net.core.wmem_default": str(4 * 1024 * 1024),
                      "net.core.rmem_default": str(4 * 1024 * 1024)}
# What Mininet's fixLimits() raises machine-wide; we put back what we found.
MININET_SYSCTLS = (
    "fs.file-max", "net.core.wmem_max", "net.core.rmem_max", "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem", "net.core.netdev_max_backlog", "net.ipv4.neigh.default.gc_thresh1",
    "net.ipv4.neigh.default.gc_thresh2", "net.ipv4.neigh.default.gc_thresh3",
    "net.ipv4.route.max_size", "kernel.pty.max",
)
CONTROLLER_CONFIG_ENV = "LTP_CONTROLLER_CONFIG"  # read by topologies/controller/controller_app.py
FLOW_COOKIE = 0x17B  # marks the controller's flows, so we can poll the switch for them
MCAST_COOKIE = 0x17C  # marks the multicast app's flows
CONTROLLER_READY_S = 30.0
FLOWS_READY_S = 15.0


def _ledger(state_dir: Path) -> Ledger:
    return Ledger(state_dir / "ledger.json")


def clean(state_dir: Path = STATE_DIR) -> list[str]:
    """Remove what a testbed that is no longer running left behind; return what was removed.

    Refuses while the testbed that owns the ledger is still alive.
    """
    ledger = _ledger(state_dir)
    ledger.load()
    owner = ledger.owner()
    if owner is not None and owner.alive() and owner.pid != os.getpid():
        raise TestbedError(f"a testbed is running as process {owner.pid}; stop it first.")
    return reclaim(ledger, ovs.stop)


def running_owner(state_dir: Path = STATE_DIR) -> ProcessRef | None:
    """The live process whose testbed holds ``state_dir`` now, if any."""
    ledger = _ledger(state_dir)
    ledger.load()
    owner = ledger.owner()
    return owner if owner is not None and owner.alive() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    """True if something listens on 127.0.0.1:``port`` (read from /proc, no probe connection)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == want and line.split()[3] == "0A" for line in f.readlines()[1:])


class _Recorded:
    """Mixin: record a Mininet node's shell in the ledger the moment it exists."""

    ledger: Ledger | None = None

    def startShell(self, *args, **kwargs):  # noqa: N802 (Mininet's name)
        super().startShell(*args, **kwargs)
        if self.ledger is not None:
            self.ledger.add_process("processes", ProcessRef.of(self.shell.pid))


class Testbed(UpDown):
    """The emulated network (incast star or fabric) with its switches and controller; see the
    module docstring."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, params: IncastParams | FabricParams, folder: Path, *,
                 state_dir: Path = STATE_DIR, stats_interval_s: float = 0.5) -> None:
        self.params = params
        self.folder = Path(folder)
        self.state_dir = state_dir
        self.stats_interval_s = stats_interval_s
        self.ledger = _ledger(state_dir)
        self.topo = params.topo()
        self.ovs = ovs.PrivateOVS(state_dir / "ovs")
        self.controller: subprocess.Popen | None = None
        self.controller_ref: ProcessRef | None = None
        self.controller_log = self.folder / "controller.log"
        self.stats_path = self.folder / "port_stats.jsonl"
        self.events_path = self.folder / "controller_events.jsonl"
        self.control: ControllerClient | None = None
        self.mcast: MulticastClient | None = None
        """The multicast app's client (topologies that describe their wiring; else None)."""
        self.net: Mininet | None = None
        self.ingress = Ingress(self)
        """Loss and delay at each host's ingress (:class:`~topologies.impair.ingress.Ingress`)."""
        self.meter = Meter(self)
        """Counters, RTTs, port statistics (:class:`~topologies.testbed.measure.Meter`)."""
        self.queue = BottleneckQueue(self)
        """The bottleneck's queue: the FIFO, or a transport's priority bands
        (:class:`~topologies.testbed.bottleneck.BottleneckQueue`)."""
        self._controller_log_offset = 0
        self._saved_env: dict[str, str | None] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        if os.geteuid() != 0:
            raise TestbedError("the emulated network needs root; run as root (sudo).")
        return super().__enter__()

    def _up(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        leftovers = clean(self.state_dir)
        if leftovers:
            (self.folder / "reclaimed.txt").write_text("\n".join(leftovers) + "\n")
        self._check_names_free()
        self.ledger.claim()
        self.ledger.set("links", self.params.link_names())

        for key, value in OVS_SOCKET_BUFFERS.items():
            self._set_sysctl(key, value)
        for key in MININET_SYSCTLS:
            self.ledger.remember_sysctl(key, read_sysctl(key))
        self.ledger.set("ovs", str(self.ovs.folder))
        self.ovs.start()
        # Mininet's own ovs-vsctl calls find the private instance through these variables.
        for key, value in ovs.ovs_env(self.ovs.folder).items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value

        port = self._start_controller()
        setLogLevel("critical")  # Mininet reports HTB quantum notices as errors
        _Recorded.ledger = self.ledger
        switch = functools.partial(RecordedSwitch, datapath="user", protocols="OpenFlow13",
                                   failMode="secure")
        controller = functools.partial(RemoteController, ip="127.0.0.1", port=port)
        self.net = Mininet(topo=self.topo, switch=switch, host=RecordedHost, link=TCLink,
                           controller=controller, autoSetMacs=False, autoStaticArp=True,
                           waitConnected=False, build=True)
        self.net.start()
        # Hosts speak IPv4 only; IPv6 router solicitations and MLD reports would otherwise
        # cross the switch during runs and blur the packet counters.
        for name in self.host_names():
            self.host_run(name, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                          "net.ipv6.conf.default.disable_ipv6=1")
        for dev in self.topo.queue_intfs():
            self.queue.create(dev)
        self.ingress.configure(Impairment(self.params.loss_pct))
        self._wait_for_flows()

    def _down(self) -> None:
        # A second Ctrl-C must not cut the cleanup short.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if self.net is not None:
                with contextlib.suppress(Exception):
                    self.ingress.delay.stop()
            for item in list(self.ledger.data.get("groups", [])):
                ProcessRef(**item).kill_group()
            if self.net is not None:
                with contextlib.suppress(Exception):
                    self.net.stop()
                self.net = None
            _Recorded.ledger = None
            if self.controller is not None:
                self.controller_ref.kill_group()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.controller.wait(timeout=5)
                self.controller = None
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved_env = {}
            if self.ledger.data:
                reclaim(self.ledger, ovs.stop)
        finally:
            signal.signal(signal.SIGINT, previous)

    def _set_sysctl(self, key: str, value: str) -> None:
        self.ledger.remember_sysctl(key, read_sysctl(key))
        write_sysctl(key, value)

    def _check_names_free(self) -> None:
        taken = [name for name in self.params.link_names() if link_exists(name)]
        if taken:
            raise TestbedError(
                f"interface {taken[0]} already exists, so another Mininet network is up; "
                "stop it first (if it was ours, `invoke clean` removes it)."
            )

    def _start_controller(self) -> int:
        port, control_port = _free_port(), _free_port()
        settings = {"hosts": self.topo.forwarding_table(),
                    "switches": {str(t["dpid"]): t["hosts"]
                                 for t in self.topo.switch_tables().values()},
                    "stats_path": str(self.stats_path),
                    "stats_interval_s": self.stats_interval_s,
                    "cookie": FLOW_COOKIE, "control_port": control_port,
                    "events_path": str(self.events_path)}
        apps, ports = ["topologies.controller.controller_app"], [port, control_port]
        if hasattr(self.topo, "wiring"):
            ports.append(_free_port())
            settings.update(wiring=self.topo.wiring(), mcast_control_port=ports[-1],
                            mcast_cookie=MCAST_COOKIE)
            apps.append("topologies.controller.mcast_app")
            self.mcast = MulticastClient(ports[-1], settle=self.ovs.settle_datapath,
                                         purge=self.ovs.purge_datapath)
        config = self.folder / "controller.json"
        config.write_text(json.dumps(settings, indent=1))
        self.control = ControllerClient(control_port, settle=self.ovs.settle_datapath)
        # osken-manager is installed next to the interpreter running the harness (the venv).
        manager = Path(sys.executable).parent / "osken-manager"
        # A script's sys.path starts at its own folder, not the working directory, so without
        # this the apps would be imported from wherever the venv's editable install points
        # (another checkout of the project), not from this one.
        python_path = os.pathsep.join(filter(None, [str(PROJECT_DIR),
                                                    os.environ.get("PYTHONPATH")]))
        with open(self.controller_log, "ab") as log:
            self.controller = subprocess.Popen(
                [str(manager), "--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(port),
                 *apps],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=PROJECT_DIR,
                env={**os.environ, CONTROLLER_CONFIG_ENV: str(config), "PYTHONPATH": python_path})
        self.controller_ref = ProcessRef.of(self.controller.pid)
        self.ledger.add_process("groups", self.controller_ref)
        deadline = time.monotonic() + CONTROLLER_READY_S
        while not all(_listening(p) for p in ports):
            if self.controller.poll() is not None:
                raise TestbedError(f"the controller exited at start; see {self.controller_log}.")
            if time.monotonic() > deadline:
                raise TestbedError(f"the controller did not listen within {CONTROLLER_READY_S:g} s; "
                                   f"see {self.controller_log}.")
            time.sleep(0.05)
        return port

    def _wait_for_flows(self) -> None:
        deadline = time.monotonic() + FLOWS_READY_S
        for switch, table in self.topo.switch_tables().items():
            want = len(table["hosts"]) + 2
            while True:
                flows = run("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch,
                             f"cookie={FLOW_COOKIE:#x}/-1")
                if flows.count("cookie=") >= want:
                    break
                if time.monotonic() > deadline:
                    raise TestbedError(f"the controller installed {flows.count('cookie=')} of "
                                       f"{want} flows on {switch} within {FLOWS_READY_S:g} s; "
                                       f"see {self.controller_log}.")
                time.sleep(0.02)

    # ---- use -------------------------------------------------------------------------------

    def host(self, name: str):
        """The Mininet host ``name``."""
        return self.net[name]

    def host_names(self) -> list[str]:
        """The PS first, then the workers in rank order, then any cross-traffic hosts."""
        return self.params.host_names

    def host_run(self, name: str, *args: str) -> str:
        """Run a command inside host ``name`` and return its output; raise on failure."""
        out, err, code = self.net[name].pexec(list(args))
        if code != 0:
            raise TestbedError(f"{' '.join(args)} failed on {name}: {(err or out).strip()}")
        return out

    def reset_routes(self) -> None:
        """Put every host's route back to the kernel's own (drops per-route settings like
        rto_min)."""
        for name, ip in self.host_ips().items():
            self.host_run(name, "ip", "route", "replace", self.params.subnet, "dev", intf(name), "proto",
                          "kernel", "scope", "link", "src", ip)

    def host_ips(self) -> dict[str, str]:
        """Every host's IPv4 address, by name."""
        return {e["host"]: e["ip"] for e in self.topo.forwarding_table()}

    def start_process(self, host: str, argv: list[str], log_path: Path,
                      env: dict[str, str] | None = None,
                      pass_fds: tuple[int, ...] = ()) -> HostProcess:
        """Start ``argv`` inside ``host`` in its own session, output to ``log_path``; the
        descriptors ``pass_fds`` stay open in it (``mnexec`` keeps them)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            popen = self.net[host].popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, cwd=PROJECT_DIR,
                                         pass_fds=pass_fds)
        return HostProcess(host, log_path, self.ledger, popen=popen)

    def controller_errors(self) -> list[str]:
        """Exception lines the controller logged since the last call (empty if healthy)."""
        bad = []
        if self.controller is not None and self.controller.poll() is not None:
            bad.append(f"the controller exited with code {self.controller.returncode}")
        with open(self.controller_log, "rb") as f:
            f.seek(self._controller_log_offset)
            text = f.read().decode(errors="replace")
            self._controller_log_offset = f.tell()
        bad += [line for line in text.splitlines()
                if re.search(r"Traceback|Exception|Error", line)]
        return bad

class RecordedHost(_Recorded, Host):
    """A Mininet host whose shell is recorded in the ledger."""


class RecordedSwitch(_Recorded, OVSSwitch):
    """An Open vSwitch bridge whose Mininet shell is recorded in the ledger."""
