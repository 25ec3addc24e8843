"""What the loopback tables call a scheme that is no transport: the names both the benchmark
(:mod:`harness.bench.loopback`) and its claims (:mod:`harness.reporting.publish.claims.loopback`)
read, kept in the reporting layer so that both may.

A scheme :data:`MAC_PREFIX` + an algorithm of :data:`MAC_ALGORITHMS` times the core's MAC alone
(:func:`harness.bench.loopback.mac_push`): what ``auth`` costs a push at the least.
"""

from __future__ import annotations

MAC_PREFIX = "mac-"
MAC_ALGORITHMS = ("gmac128", "siphash24")   # the core's, as its option mac names them
