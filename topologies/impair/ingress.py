"""What each host's ingress does to packets on a running network: loss and delay, set in place.

:class:`Ingress` is a running testbed's impairments (``testbed.ingress``). It applies an
:class:`~topologies.impair.loss.Impairment` (a loss model, a one-way delay and a seed) at the
ingress of every host or of named hosts, in the spirit of Mininet's ``Intf.config()``, so
consecutive runs can share one network: uniform loss as an nftables rule set, replayable
uniform loss, Gilbert-Elliott loss (per packet or in time) and recorded traces as the eBPF
program (:mod:`topologies.impair.loss`; :meth:`Ingress.record` saves what it dropped), delay through
the hosts' NFQUEUE helpers (:class:`~topologies.impair.delay.DelayLine`). It also reads each
host's loss counters, for the testbed's snapshots.

It needs a host runner: ``host_names()``, ``host_run(host, *args)``, ``start_process(host, argv,
log_path)`` and ``folder`` (a :class:`topologies.testbed.network.Testbed` is one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from topologies.impair import loss
from topologies.impair.delay import DelayLine
from topologies.impair.loss import CHAINS, Impairment, Trace, Uniform
from topologies.impair.trace import TRACE_SUFFIX
from topologies.incast import intf
from transports.base import UserError


class IngressError(UserError, RuntimeError):
    """A host the network does not have."""


class Ingress:
    """The impairment at every host's ingress of a running network; see the module docstring."""

    def __init__(self, hosts) -> None:
        self.hosts = hosts
        self.delay = DelayLine(hosts)
        self.applied: dict[str, Impairment] = {}
        """The impairment applied at each host's ingress."""

    def configure(self, impairment: Impairment, hosts: Iterable[str] | None = None) -> None:
        """Apply ``impairment`` at the ingress of every host, or of the named ``hosts``; the
        others keep theirs. Loss counters restart from zero on the hosts configured.

        Under Gilbert-Elliott loss each host runs its own chain, seeded with the impairment's
        seed and the host's position in ``host_names()`` (so hosts do not lose in step).
        """
        names = self.hosts.host_names()
        chosen = names if hosts is None else list(hosts)
        unknown = [h for h in chosen if h not in names]
        if unknown:
            raise IngressError(f"there is no host {unknown[0]!r}; the hosts are "
                               f"{', '.join(names)}.")
        if isinstance(impairment.loss, CHAINS):
            loss.ge_binary()  # missing build: one sentence before anything changes
        for host in chosen:
            self._apply_loss(host, impairment, names.index(host))
        self.delay.set_hosts({host: impairment.delay_ms for host in chosen})

    def chained(self, host: str) -> bool:
        """Whether ``host`` runs a Gilbert-Elliott chain now."""
        return isinstance(self.applied.get(host, Impairment()).loss, CHAINS)

    def record(self, folder: Path) -> None:
        """Write the packet positions each chained host dropped since it was configured to
        ``folder/<host>.trace`` (:mod:`topologies.impair.trace`); nothing if none is chained."""
        for host in self.hosts.host_names():
            if self.chained(host):
                folder.mkdir(parents=True, exist_ok=True)
                self.hosts.host_run(host, *loss.ge_argv("dump", intf(host),
                                                        folder / f"{host}{TRACE_SUFFIX}"))

    def _apply_loss(self, host: str, imp: Impairment, stream: int) -> None:
        was_chained = self.chained(host)
        if isinstance(imp.loss, Trace):
            # A host the trace has no file for loses nothing.
            model = imp.loss.files().get(host)
            if model is None:
                imp = dataclasses.replace(imp, loss=Uniform(0.0))
        script = self.hosts.folder / f".impair-{host}.nft"
        script.write_text(loss.ruleset(intf(host), imp.loss))
        try:
            self.hosts.host_run(host, "nft", "-f", str(script))
        finally:
            script.unlink()
        if isinstance(imp.loss, CHAINS):
            # Replaces a running program atomically, with fresh counters.
            self.hosts.host_run(host, *loss.ge_argv(
                "attach", intf(host), model if isinstance(imp.loss, Trace) else imp.loss,
                imp.seed, stream))
        elif was_chained:
            self.hosts.host_run(host, *loss.ge_argv("detach", intf(host)))
        self.applied[host] = imp

    def counters_command(self, host: str) -> str:
        """A shell command that prints ``host``'s loss counters: the nftables counters, then,
        after a line ``@@``, the chain's (when it runs one); :meth:`parse_counters` reads it."""
        chain = (" && echo '@@' && " + " ".join(loss.ge_argv("read", intf(host)))) \
            if self.chained(host) else ""
        return f"nft -j list counters table netdev {loss.TABLE}{chain}"

    @staticmethod
    def parse_counters(text: str) -> dict[str, int | None]:
        """What :meth:`counters_command` printed: ``arrived`` and ``dropped`` (nftables), and
        ``bursts``, ``bad_periods``, ``bad_ns`` (the chain's; None without one), the fields of
        :class:`~topologies.testbed.counters.LossCounters`."""
        parts = text.split("@@")
        nft = loss.parse_counters(parts[0])
        chain = loss.parse_ge_counters(parts[1]) if len(parts) > 1 else {}
        return {"arrived": nft["arrived"], "dropped": nft["dropped"],
                "bursts": chain.get("bursts"), "bad_periods": chain.get("bad_periods"),
                "bad_ns": chain.get("bad_ns")}
