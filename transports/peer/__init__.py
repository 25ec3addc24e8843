"""Peer-to-peer transports: every peer sends its vector to the receivers chosen for it.

The contract is :mod:`transports.peer.base` (:class:`~transports.peer.base.PeerEnd`); the schemes
are ``mcast`` (:mod:`transports.peer.mcast`: UDP to a multicast group or as unicast copies,
NACK-based repair, early close per receiver) and ``tcp`` (:mod:`transports.peer.tcp`: unicast
copies over TCP). They are named here, not in :mod:`transports.registry`, whose contract is the
parameter server's. See ``docs/peer-transports.md``.

    >>> from transports.peer import create, parse
    >>> slug, options = parse("mcast+close_frac=0.9")
    >>> end = create(slug, 0, ips, 6400, n_floats, session, options)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transports.base import OptionError, Session, parse_scheme
from transports.peer.base import Incoming, PeerEnd, SendReport
from transports.peer.mcast import McastPeer
from transports.peer.tcp import TcpPeer

SCHEMES: dict[str, type[PeerEnd]] = {"mcast": McastPeer, "tcp": TcpPeer}

__all__ = ["PEER_PREFIX", "SCHEMES", "Incoming", "PeerEnd", "SendReport", "create", "parse"]


# A peer scheme where one scheme names a transport (the loopback bench's plans): this prefix and
# a slug of this package (peer-mcast, peer-tcp).
PEER_PREFIX = "peer-"


def parse(text: str) -> tuple[str, dict[str, Any]]:
    """``"mcast+close_frac=0.9+poll_ms=2"`` -> ``("mcast", {"close_frac": 0.9, "poll_ms": 2})``:
    :func:`transports.base.parse_scheme`, for a slug of :data:`SCHEMES` (the options are
    checked by :func:`create`)."""
    slug, options = parse_scheme(text, "peer transport")
    if slug not in SCHEMES:
        raise OptionError(f"unknown peer transport {slug!r}; choose one of "
                          f"{', '.join(sorted(SCHEMES))}.")
    return slug, options


def create(slug: str, rank: int, ips: Sequence[str], port: int, n_floats: int,
           session: Session, options: Mapping[str, Any] | None = None,
           **keywords: Any) -> PeerEnd:
    """Open peer ``rank``'s end of scheme ``slug`` (its background thread starts receiving).

    ``keywords`` go to the class: ``ports`` (one port per rank, for loopback) and, for ``mcast``,
    the test hook ``drop``.
    """
    if slug not in SCHEMES:
        raise OptionError(f"unknown peer transport {slug!r}; choose one of "
                          f"{', '.join(sorted(SCHEMES))}.")
    return SCHEMES[slug](rank, ips, port, n_floats, session, options, **keywords)
