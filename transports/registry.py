"""The registry of transports: one slug per scheme, with what figures need to draw it.

A slug names a transport class plus the options that define the scheme (``tcp-reno`` is the TCP
transport with ``cc=reno``); those options are fixed, everything else can be set per run. Classes
are imported lazily, so listing the registry never needs the native library to be built.

    >>> from transports import registry
    >>> t = registry.create("tcp-bbr")
    >>> t.options()
    {'cc': 'bbr'}
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

from transports.base import OptionError, Transport


class UnknownTransport(KeyError):
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
    # it receives and close messages before repairing all of it (see tests/conformance).
    test_loss_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def transport_class(self) -> type[Transport]:
        """Import and return the transport class."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


_ENTRIES = (
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
                   "close_grace_min_us": 0, "grace_rtt_mult": 0.0}),
    TransportInfo("ltp-reliable", "LTP reliable", "#9467bd", "v", "transports.ltp:LtpTransport",
                  {"threshold_min": 1.0, "threshold_max": 1.0}, False,
                  "ablation: LTP's machinery with every message delivered whole (threshold 1.0)"),
    TransportInfo("ltp-fixed", "LTP fixed 95%", "#8c564b", "P", "transports.ltp:LtpTransport",
                  {"threshold_min": 0.95, "threshold_max": 0.95, "filler": "zero"}, True,
                  "ablation: a fixed 95 % threshold with zero filling (MLT-style bounded loss)",
                  {"rx_drop_frac": 0.1, "close_grace_min_us": 0, "grace_rtt_mult": 0.0}),
    TransportInfo("plot", "PLOT", "#e377c2", "X", "transports.plot:PlotTransport",
                  {}, True, "per-layer loss-tolerance bounds (SNR profiling) on LTP's core",
                  {"rx_drop_frac": 0.1, "bound_rule": "size", "bound_min": 0.85,
                   "reliable_below_floats": 0, "close_grace_min_us": 0, "grace_rtt_mult": 0.0}),
)

REGISTRY: dict[str, TransportInfo] = {e.slug: e for e in _ENTRIES}


def register(info: TransportInfo) -> None:
    """Add a scheme (used by the registry's own entries and by users' experiments)."""
    if info.slug in REGISTRY:
        raise ValueError(f"a transport named {info.slug!r} is already registered.")
    REGISTRY[info.slug] = info


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


def slugs() -> list[str]:
    """Every registered slug, in registration order."""
    return list(REGISTRY)


def get(slug: str) -> TransportInfo:
    """The entry for ``slug``, or :class:`UnknownTransport` with the list of known slugs."""
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


load_plugins()
