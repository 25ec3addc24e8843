"""What the loopback tables call a scheme that is no transport: the names both the benchmark
(:mod:`harness.bench.loopback`) and its claims (:mod:`harness.reporting.publish.claims.loopback`)
read, kept in the reporting layer so that both may.

A scheme :data:`MAC_PREFIX` + one of the core's MAC algorithms (its option ``mac``) times the
core's MAC alone (:func:`harness.bench.loopback.mac_push`): what ``auth`` costs a push at the
least. :data:`FLOOR` times the kernel's part of any transport over UDP.
"""

from __future__ import annotations

MAC_PREFIX = "mac-"
# The floor of a UDP path on loopback (:func:`harness.bench.loopback.floor_push`): the kernel's
# part of any transport over UDP, with nothing of a transport's own.
FLOOR = "udp-floor"


def mac_algorithm(scheme: str) -> str:
    """The MAC algorithm a :data:`MAC_PREFIX` scheme names, one of the core's (read from its
    option table); ``ValueError`` in one sentence for any other."""
    from transports import native

    known = sorted(native.core_options()["mac"].choices)
    algorithm = scheme[len(MAC_PREFIX):]
    if not scheme.startswith(MAC_PREFIX) or algorithm not in known:
        raise ValueError(f"{scheme} is no MAC of the core: the MAC must be one of "
                         f"{', '.join(MAC_PREFIX + a for a in known)}.")
    return algorithm
