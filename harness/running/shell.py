"""An interactive testbed: ``invoke shell --workers 8 --loss 5 --transport ltp``.

:func:`open_shell` brings up the incast star and its controller (a
:class:`~topologies.testbed.network.Testbed`), applies the loss and delay at every host's
ingress and the transport's host settings (as a run does), prepares a run folder a user can
start the PS and the workers in by hand, prints :func:`help_text`, and opens Mininet's command
line (:class:`mininet.cli.CLI`). Leaving it (``exit``, Ctrl-D, end of input, SIGTERM or a
closed terminal) takes everything down through the testbed's own cleanup; Ctrl-C at the prompt
only interrupts the command running in it, as in Mininet.

The CLI reads its commands from standard input, so a script can drive it:
``printf 'pingall\\nexit\\n' | invoke shell``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TextIO

from harness.running import keys as handover
from harness.running.runfiles import RunFiles
from harness.running.spec import RunSpec
from topologies.impair.loss import TABLE, Impairment, Uniform, parse_loss
from topologies.incast import PS_NAME, intf
from transports.base import Session, parse_scheme


PROJECT = Path(__file__).resolve().parents[2]


class _Ended(Exception):
    """SIGTERM or SIGHUP arrived while the command line was open."""


def _end(signum, frame):
    raise _Ended


def shell_spec(transport: str = "ltp", workers: int = 8, loss: str = "0",
               bandwidth_mbps: float = 100.0, delay_ms: float = 0.0,
               queue_pkts: int = 64) -> RunSpec:
    """The run the shell's network is set up for (a scheme with options, ``ltp+filler=zero``;
    any loss model ``--loss`` takes); validated as a sweep's runs are."""
    slug, options = parse_scheme(transport)
    model = parse_loss(loss)
    lossy = ({"loss_pct": model.loss_pct} if isinstance(model, Uniform)
             else {"loss_model": model.text()})
    return RunSpec(transport=slug, transport_options=options, n_workers=workers,
                   bottleneck_mbps=bandwidth_mbps, delay_ms=delay_ms, queue_pkts=queue_pkts,
                   **lossy)


def help_text(spec: RunSpec, files: RunFiles, python: str = sys.executable) -> str:
    """What the shell prints before its prompt: how to look at and use the network."""
    # The venv's own install may point at another checkout: name this one.
    node = (f"PYTHONPATH={PROJECT} {python} -m harness.hosts.node --run {files.dir} "
            f"{handover.FLAG} 3")
    ps, w1 = PS_NAME, "w1"
    return "\n".join([
        f"ltp-testbed shell: {spec.n_workers} workers, {spec.bottleneck_mbps:g} Mbit/s, "
        f"queue {spec.queue_pkts} packets, loss {spec.loss_text}, delay {spec.delay_ms:g} ms, "
        f"transport {spec.scheme}",
        "",
        "  pingall                               every host pings every other",
        f"  {w1} ping -c 3 {ps}                    one path (ping under-reports delay added at "
        "its own ingress: try ping -U)",
        "  sh ovs-ofctl -O OpenFlow13 dump-ports s1    the switch's per-port counters",
        f"  {ps} nft list counters table netdev {TABLE}    {ps}'s loss counters (arrived, "
        "dropped)",
        f"  {ps} iperf3 -s -1 &                  a TCP flow by hand: a server for one test,",
        f"  {w1} iperf3 -c {ps} -t 5                 and a client",
        f"  {ps} tcpdump -ni {intf(ps)} -c 20 udp    watch packets arrive",
        "  one training run by hand, prepared in the folder below: the PS first, in the "
        "background,",
        f"    {ps} {node} --role ps 3<{key_file(files, ps)} > {files.log(ps)} 2>&1 &",
        "  then every worker (wN is rank N-1; all but the last in the background), each given "
        "its own keys' file:",
        f"    {w1} {node} --role worker --rank 0 3<{key_file(files, w1)}",
        "  exit                                  take everything down (Ctrl-C only stops the "
        "command running)",
        "",
    ])


def _kill_strays(testbed) -> None:
    """Kill what the user started inside the hosts and left running (background jobs,
    daemons that left the host shell's process group): every process in a host's network
    namespace other than its shell and the testbed's own (the delay line: the ledger's process
    groups). The testbed's own cleanup then stops those and the shells."""
    own = {item["pid"] for item in testbed.ledger.data.get("groups", [])}
    shells = {}
    for name in testbed.host_names():
        pid = testbed.host(name).shell.pid
        with contextlib.suppress(OSError):
            shells[os.readlink(f"/proc/{pid}/ns/net")] = pid
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            shell = shells.get(os.readlink(f"/proc/{entry}/ns/net"))
            if shell is not None and int(entry) != shell and os.getpgid(int(entry)) not in own:
                os.kill(int(entry), signal.SIGKILL)


def key_file(files: RunFiles, host: str) -> Path:
    """The file of ``host``'s keys in a run prepared by hand (:func:`prepare_run`)."""
    return files.dir / "keys" / f"{host}.keys"


def prepare_run(spec: RunSpec, folder: Path) -> RunFiles:
    """A run folder under ``folder`` for starting hosts by hand: the spec, and each host's keys
    (its own pairs' only) in a file of its own that only its owner can read, which a host started
    by hand opens as its keys' descriptor (``--keys-fd 3 3<FILE``). Files, unlike a run's pipes:
    a user types the commands; the shell deletes them when it ends."""
    files = RunFiles(folder / "run")
    files.raw.mkdir(parents=True, exist_ok=True)
    files.spec.write_text(spec.to_json())
    keys = handover.blobs(handover.run_keys(Session.draw(), spec.pattern, spec.n_workers))
    (files.dir / "keys").mkdir(mode=0o700, exist_ok=True)
    for host, blob in keys.items():
        path = key_file(files, host)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
    return files


def open_shell(spec: RunSpec, folder: Path, stdin: TextIO = sys.stdin,
               say=print) -> None:
    """Bring up ``spec``'s network under ``folder``, set it up as ``spec``'s run would be, and
    run Mininet's CLI on ``stdin`` until it ends; take everything down in every case."""
    from mininet.cli import CLI
    from mininet.log import setLogLevel

    from harness.running.runner import apply_host_settings
    from topologies.testbed.network import Testbed
    from transports import registry

    transport = registry.create(spec.transport, spec.options())
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    with Testbed(spec.network, folder / "network") as testbed:
        testbed.ingress.configure(Impairment(spec.loss_text, spec.delay_ms, seed=spec.seed))
        apply_host_settings(testbed, transport)
        files = prepare_run(spec, folder)
        say(help_text(spec, files))
        setLogLevel("output")   # the CLI prints through Mininet's log; the testbed quiets it
        try:
            for sig in saved:
                signal.signal(sig, _end)
            with contextlib.suppress(_Ended):
                CLI(testbed.net, stdin=stdin)
        finally:
            _kill_strays(testbed)
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            setLogLevel("critical")
            shutil.rmtree(files.dir / "keys", ignore_errors=True)
    say("the testbed is down.")
