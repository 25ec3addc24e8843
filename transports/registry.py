"""The registry of transports: one slug per scheme, with what figures need to draw it.

A slug names a transport class plus the options that define the scheme (``tcp-reno`` is the TCP
transport with ``cc=reno``); those options are fixed, everything else can be set per run. Every
option, fixed or not, is a row of the class's option table (:class:`transports.base.Option`).
Classes are imported lazily, so listing the slugs never needs the native library to be built.

Schemes outside the project are modules named in ``$LTP_TRANSPORTS`` (:func:`load_plugins`).
Importing this module has no side effects: the plugins are imported the first time the registry
is asked for its slugs or for a slug it does not hold yet, so the sweep, the PS and the worker
processes (which inherit the variable) all see them.

    >>> from transports import registry
    >>> t = registry.create("tcp-bbr")
    >>> t.options()
    {'cc': 'bbr', 'rto_min_ms': None}
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

from transports.base import Option, OptionError, Transport, UserError


class UnknownTransport(UserError, KeyError):
    """The slug is not in the registry."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclasses.dataclass(frozen=True)
class TransportInfo:
    """How to build one scheme and how to draw it."""

    slug: str
    display_name: str
    color: str
    marker: str
    target: str  # "module:Class"
    fixed_options: Mapping[str, Any]
    loss_tolerant: bool
    description: str
    # Options with which the conformance tests make a loss-tolerant transport drop part of what
    # it receives and close messages before repairing all of it (see tests/conformance). LTP's
    # keep Ethernet-sized datagrams: loopback's would be 64 KB, a few per message, and one drop
    # would then take a quarter of it.
    test_loss_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def transport_class(self) -> type[Transport]:
        """Import and return the transport class."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def option_rows(self) -> list[tuple[Option, Any, bool]]:
        """Every option of this scheme: (its row, its value in this scheme, fixed by the slug?).

        Raises :class:`OptionError` if a fixed option is not in the class's table.
        """
        table = self.transport_class().option_table()
        unknown = sorted(set(self.fixed_options) - {o.name for o in table})
        if unknown:
            raise OptionError(f"scheme {self.slug!r} fixes {unknown[0]!r}, which its transport "
                              "does not have.")
        return [(o, self.fixed_options.get(o.name, o.default), o.name in self.fixed_options)
                for o in table]


# The project's own schemes, registered below; plugins add theirs with register().
BUILTIN = (
    TransportInfo("tcp-cubic", "TCP CUBIC", "#1f77b4", "o", "transports.tcp:TcpTransport",
                  {"cc": "cubic"}, False, "Linux TCP with CUBIC congestion control"),
    TransportInfo("tcp-reno", "TCP Reno", "#ff7f0e", "s", "transports.tcp:TcpTransport",
                  {"cc": "reno"}, False, "Linux TCP with Reno congestion control"),
    TransportInfo("tcp-bbr", "TCP BBR", "#2ca02c", "^", "transports.tcp:TcpTransport",
                  {"cc": "bbr"}, False, "Linux TCP with BBR (v1) congestion control"),
    TransportInfo("tcp-cubic-lowrto", "TCP CUBIC, 5 ms min RTO", "#17becf", "<",
                  "transports.tcp:TcpTransport", {"cc": "cubic", "rto_min_ms": 5}, False,
                  "Linux TCP CUBIC with the minimum RTO lowered to 5 ms on every host's route"),
    TransportInfo("ltp", "LTP", "#d62728", "D", "transports.ltp:LtpTransport",
                  {}, True, "Loss-tolerant Transmission Protocol: early close, Bubble Filling",
                  {"rx_drop_frac": 0.1, "threshold_min": 0.85, "threshold_max": 0.85,
                   "close_grace_min_us": 0, "grace_rtt_mult": 0.0, "packet_payload_bytes": 1472}),
    TransportInfo("ltp-reliable", "LTP reliable", "#9467bd", "v", "transports.ltp:LtpTransport",
                  {"threshold_min": 1.0, "threshold_max": 1.0}, False,
                  "ablation: LTP's machinery with every message delivered whole (threshold 1.0)"),
    TransportInfo("ltp-fixed", "LTP fixed 95%", "#8c564b", "P", "transports.ltp:LtpTransport",
                  {"threshold_min": 0.95, "threshold_max": 0.95, "filler": "zero"}, True,
                  "ablation: a fixed 95 % threshold with zero filling (MLT-style bounded loss)",
                  {"rx_drop_frac": 0.1, "close_grace_min_us": 0, "grace_rtt_mult": 0.0,
                   "packet_payload_bytes": 1472}),
    TransportInfo("plot", "PLOT", "#e377c2", "X", "transports.plot:PlotTransport",
                  {}, True, "per-layer loss-tolerance bounds (SNR profiling) on LTP's core",
                  {"rx_drop_frac": 0.1, "bound_rule": "size", "bound_min": 0.85,
                   "reliable_below_floats": 0, "close_grace_min_us": 0, "grace_rtt_mult": 0.0,
                   "packet_payload_bytes": 1472}),
    TransportInfo("phase-bound", "Phase-aware bound", "#a0522d", "h",
                  "transports.phase:PhaseTransport", {}, True,
                  "a fixed loss bound per round: strict in sensitive training phases (warm-up, "
                  "fast-changing gradient norm), loose otherwise, on LTP's core",
                  {"rx_drop_frac": 0.1, "strict_threshold": 0.85, "loose_threshold": 0.85,
                   "close_grace_min_us": 0, "grace_rtt_mult": 0.0,
                   "packet_payload_bytes": 1472}),
    TransportInfo("mlt", "MLT", "#6b8e23", "p", "transports.mlt:MltTransport", {}, True,
                  "MLT-style: a fixed loss bound per gradient part, datagrams marked (DSCP) by "
                  "gradient importance, strict priority bands at the bottleneck (docs/mlt.md)",
                  {"rx_drop_frac": 0.1, "loss_bound": 0.15, "close_grace_min_us": 0,
                   "grace_rtt_mult": 0.0, "packet_payload_bytes": 1472}),
    TransportInfo("optireduce", "OptiReduce", "#b8860b", "*",
                  "transports.optireduce:OptiReduceTransport", {}, True,
                  "bounded-time collectives: each part waits at most an adaptive timeout, "
                  "gradients Hadamard-coded so a lost tail spreads as noise, on LTP's core "
                  "(ring and tree only; docs/optireduce.md)",
                  # a sender paced at 20 Mbit/s outlasts the 5 ms deadline of the warm-up
                  {"rx_drop_frac": 0.1, "cc": False, "fixed_rate_mbps": 20.0,
                   "timeout_max_ms": 5.0, "packet_payload_bytes": 1472}),
)

REGISTRY: dict[str, TransportInfo] = {}
"""Every scheme registered so far by slug. Use :func:`slugs`, :func:`entries` or :func:`get`,
which also see the plugins named in ``$LTP_TRANSPORTS``."""


def register(info: TransportInfo) -> None:
    """Add a scheme. The built-in schemes are added with it below; a plugin module calls it when
    it is imported."""
    if info.slug in REGISTRY:
        raise ValueError(f"a transport named {info.slug!r} is already registered.")
    REGISTRY[info.slug] = info


for _info in BUILTIN:
    register(_info)


PLUGINS_ENV = "LTP_TRANSPORTS"


def load_plugins(spec: str | None = None) -> None:
    """Import the transport modules named in ``$LTP_TRANSPORTS`` (or ``spec``).

    A comma-separated list of module names (``mypkg.mytransport``) or paths to ``.py`` files;
    each module registers its schemes with :func:`register` when imported. Child processes inherit
    the variable, so the PS and the workers see the same registry as the sweep.
    """
    import importlib.util
    import os
    import sys

    for item in filter(None, (x.strip() for x in (spec or os.environ.get(PLUGINS_ENV, "")).split(","))):
        if item.endswith(".py"):
            name = "ltp_plugin_" + os.path.splitext(os.path.basename(item))[0]
            if name in sys.modules:
                continue
            spec_ = importlib.util.spec_from_file_location(name, item)
            if spec_ is None or not os.path.exists(item):
                raise UnknownTransport(f"{PLUGINS_ENV} names {item}, which does not exist.")
            module = importlib.util.module_from_spec(spec_)
            sys.modules[name] = module
            spec_.loader.exec_module(module)
        else:
            importlib.import_module(item)


def use_plugins(items) -> None:
    """Load the plugins ``items`` and add them to ``$LTP_TRANSPORTS``, so that every process
    started from here on (the fork server, the PS, the workers) loads them too."""
    import os

    items = [str(i) for i in items]
    load_plugins(",".join(items))
    current = [x.strip() for x in os.environ.get(PLUGINS_ENV, "").split(",") if x.strip()]
    new = [i for i in items if i not in current]
    if new:
        os.environ[PLUGINS_ENV] = ",".join(current + new)


_plugins_loaded = False


def _ensure_plugins() -> None:
    """Import the ``$LTP_TRANSPORTS`` plugins once (again after a failure, which raises)."""
    global _plugins_loaded
    if not _plugins_loaded:
        load_plugins()
        _plugins_loaded = True


def slugs() -> list[str]:
    """Every registered slug, plugins included, in registration order."""
    _ensure_plugins()
    return list(REGISTRY)


def entries() -> list[TransportInfo]:
    """Every registered scheme, plugins included, in registration order."""
    _ensure_plugins()
    return list(REGISTRY.values())


def get(slug: str) -> TransportInfo:
    """The entry for ``slug``, or :class:`UnknownTransport` with the list of known slugs.

    A slug not registered yet makes the registry import the ``$LTP_TRANSPORTS`` plugins first.
    """
    if slug not in REGISTRY:
        _ensure_plugins()
    try:
        return REGISTRY[slug]
    except KeyError:
        raise UnknownTransport(
            f"unknown transport {slug!r}; choose one of: {', '.join(REGISTRY)}."
        ) from None


def create(slug: str, options: Mapping[str, Any] | None = None) -> Transport:
    """Build the transport ``slug`` with extra ``options`` on top of its fixed ones."""
    info = get(slug)
    extra = dict(options or {})
    clash = sorted(k for k in extra if k in info.fixed_options
                   and extra[k] != info.fixed_options[k])
    if clash:
        raise OptionError(
            f"option {clash[0]!r} is what defines {slug!r} and cannot be changed; "
            "pick the slug that has the value you want."
        )
    return info.transport_class()(slug, {**info.fixed_options, **extra})
