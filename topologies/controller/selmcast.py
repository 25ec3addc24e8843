"""Multicast receiver selection: who should sender i multicast its parameters to this round.

Pure and seeded (no OpenFlow, no clock): the controller's multicast app
(:mod:`topologies.controller.mcast_app`) calls :func:`select` with its view of the network
(:mod:`topologies.controller.linkview`), and the unit tests call it with synthetic views (and
:func:`plan_round` with every sender of a round). Five policies (:data:`POLICIES`):

- ``random-p``, the baseline of the state of the art: exactly ``p`` receivers, uniformly at
  random among the other workers, blind to the network;
- ``broadcast``: every other worker;
- ``selmcast``: SELMCAST's selection as its authors describe it (Luo et al., IEEE TSC 2024, and
  the conference version's abstract, the fullest text we found): from a global view of available
  bandwidth and load, first the highest rate at which at least ``p`` receivers can be served,
  then every further receiver that rate serves; the senders of a BSP round planned jointly on one
  view, and under SSP every transfer still in flight counted as load (below);
- ``most-per-second``: the rule this project built before it had the published one, kept under
  its own name: the most receivers per second, never expected to be slower than random-p (below);
- ``selmcast-p``: the same view, exactly ``p`` receivers (below).

**The model.** A multicast of ``size_bytes`` from sender ``s`` to receivers ``R`` follows the
tree made of the paths from ``s`` to each receiver, and crosses each link of it once (the switches
copy, :mod:`topologies.controller.mcast_plan`). On link ``e`` it gets a share of what is available::

    share(e) = available(e) / (1 + planned(e))

where ``available(e)`` is the link's capacity minus its measured rate (floored,
:class:`~topologies.controller.linkview.LinkMeter`) and ``planned(e)`` counts the other multicasts
already selected this round whose trees cross ``e`` (the **load**: the controller sees every
sender's choice, so later senders steer around earlier ones). A single-rate multicast runs at its
slowest link, so receiver ``r`` can be served at ``b(r) = min over e on path(s, r) of share(e)``,
and the whole multicast takes ``T(R) = size_bytes / min over r in R of b(r)``. Because each link is
crossed once whatever the number of receivers behind it, ``b(r)`` does not depend on the other
receivers, and ``T(R)`` only on the slowest of them.

**selmcast (the published rule).** A receiver set is judged by two things, the rate it is served
at and its size, and the choice is the Pareto-optimal set that puts the rate first: the
highest rate ``b*`` at which at least ``p`` workers can be served is the ``p``-th largest
``b(r)``, and every worker with ``b(r) >= b*`` is added (on an idle homogeneous network,
everyone). Where the paper is silent, our choices: rates within :data:`RATE_TIE` of ``b*``
count as served at it (a measured view jitters: on an idle fabric the meter's rates differ by
a little, and a strict comparison left out receivers as fast as the chosen ones);
the waiting rule below; and *jointly* means best responses: the round's senders are planned one
after another on one view (each later one seeing the earlier ones' trees as load, as every
view-based policy does), then each again against all the others' trees, until no sender's choice
changes or :data:`JOINT_PASSES` passes are made. Under SSP a sender is planned alone when it
asks; the trees of the transfers still in flight (started, their sender not back yet) count as
load on their links.

**most-per-second (the project's earlier rule).** Among receiver sets ``R`` of at least ``p``
workers (all of them if fewer), maximise the receivers served per second, ``|R| / T(R)``, subject to
``T(R) <= E[T(random p-set)]``: never slower than the baseline is expected to be on the same view;
among equals, the larger ``R``. For a fixed size ``k`` the best set is the ``k`` workers of largest
``b(r)``, so the optimum is a prefix of the workers sorted by ``b(r)`` (ties: fewer planned
receptions this round first, then seeded random) and a scan over prefixes finds it exactly. On
an idle homogeneous network every prefix is as fast, so it multicasts to everyone (copies
are free once the tree exists); slow access links, congested uplinks and links loaded by earlier
multicasts this round are left out while leaving them out pays. ``p`` is a floor, not a target:
the chosen ``|R|`` is the round's effective p, and averages above the baseline's whenever
bandwidth allows.

**selmcast-p** keeps the bandwidth- and load-aware choice but not the growth: exactly ``p``
receivers, those of largest ``b(r)`` (same ties, same waiting rule). It separates the two things
the view-based rules change against random-p: *which* receivers, and *how many*.

**Everyone takes part eventually.** Training converges only if every worker keeps receiving now
and then; a worker behind a slow link would otherwise never be chosen. A worker that has received
from nobody for ``max_wait_rounds`` rounds is added to the next selection of every view-based
policy (the objective yields to this; the published rule says no more than that workers must take
part eventually, so this is ours).

The expected completion time of ``random-p`` is exact: with the ``n`` candidates' ``b`` sorted
ascending, the slowest of a uniform ``p``-subset is the ``k``-th with probability
``C(n-k, p-1) / C(n, p)``.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random

from topologies.controller.linkview import Wiring

POLICIES = ("random-p", "selmcast", "most-per-second", "selmcast-p", "broadcast")
MAX_WAIT_ROUNDS = 8
JOINT_PASSES = 6       # selmcast under BSP: passes over the round's senders at the most
RATE_TIE = 0.02        # selmcast: rates within 2 % of the chosen rate count as served at it
_TIME_SLACK = 1e-9  # comparisons of estimated times made equal by rounding


class SelectionError(ValueError):
    """A selection was asked with a bad policy, sender or p."""


@dataclasses.dataclass(frozen=True)
class Selection:
    """A sender's receivers for one round, with the estimates behind them."""

    policy: str
    sender: str
    round: int
    p: int
    receivers: tuple[str, ...]
    estimate_s: float
    """The model's completion time for these receivers."""
    random_p_estimate_s: float
    """The baseline's expected completion time on the same view."""
    rate_mbps: dict[str, float]
    """``b(r)``: the rate each candidate could be served at."""
    forced: tuple[str, ...] = ()
    """Receivers added because they had waited ``max_wait_rounds`` rounds."""

    def as_dict(self) -> dict:
        """JSON-ready."""
        return {**dataclasses.asdict(self), "receivers": list(self.receivers),
                "forced": list(self.forced)}


class RoundPlan:
    """The multicasts selected so far in the current round, the transfers in flight, and when
    each worker last received.

    A selection for a new round number starts a fresh plan; a second selection by the same
    sender in a round replaces its first.
    """

    def __init__(self) -> None:
        self.round: int | None = None
        self.trees: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
        self.last_received: dict[str, int] = {}   # rounds before the current one
        self.in_flight: dict[str, frozenset[str]] = {}

    def start(self, round_: int) -> None:
        """Make ``round_`` the current round (a new one clears what was planned)."""
        if round_ != self.round:
            for _, receivers in self.trees.values():
                for r in receivers:
                    self.last_received[r] = self.round
            self.round = round_
            self.trees = {}

    def load(self, exclude: str | None = None, in_flight: bool = False
             ) -> tuple[collections.Counter, collections.Counter]:
        """(multicasts per link, receptions per worker) planned this round, without
        ``exclude``'s own; with ``in_flight``, the trees of transfers still running whose sender
        has not been planned this round count on their links too."""
        links, receptions = collections.Counter(), collections.Counter()
        for sender, (tree, receivers) in self.trees.items():
            if sender != exclude:
                links.update(tree)
                receptions.update(receivers)
        if in_flight:
            for sender, tree in self.in_flight.items():
                if sender != exclude and sender not in self.trees:
                    links.update(tree)
        return links, receptions

    def register(self, sender: str, tree: frozenset[str], receivers: tuple[str, ...]) -> None:
        """Record ``sender``'s multicast in the current round."""
        self.trees[sender] = (tree, receivers)

    def fly(self, sender: str, tree: frozenset[str]) -> None:
        """``sender``'s transfer over ``tree`` has started."""
        self.in_flight[sender] = tree

    def land(self, sender: str) -> None:
        """``sender``'s transfer is over (it asked again)."""
        self.in_flight.pop(sender, None)

    def waited(self, worker: str) -> int:
        """Rounds since ``worker`` last received (0 if it receives this round; rounds since the
        start if never)."""
        if any(worker in receivers for _, receivers in self.trees.values()):
            return 0
        return self.round - self.last_received.get(worker, -1)


def tree_links(wiring: Wiring, sender: str, receivers) -> frozenset[str]:
    """The directed links of the multicast tree from ``sender`` to ``receivers``."""
    return frozenset(link for r in receivers for link in wiring.path(sender, r))


def random_p_expected_s(times_s: list[float], p: int) -> float:
    """Expected completion time of a uniform ``p``-subset, given each candidate's own time."""
    n = len(times_s)
    if not 1 <= p <= n:
        raise SelectionError(f"p must be from 1 to {n}, not {p}.")
    slowest_first = sorted(times_s, reverse=True)
    # The k-th slowest (0-based) is the subset's slowest when it is in the subset and the
    # k slower ones are not: C(n-1-k, p-1) of the C(n, p) subsets.
    return sum(math.comb(n - 1 - k, p - 1) * t for k, t in enumerate(slowest_first)) \
        / math.comb(n, p)


def select(policy: str, sender: str, p: int, wiring: Wiring, available_mbps: dict[str, float],
           plan: RoundPlan, *, size_bytes: int, round_: int = 0, seed: int = 0,
           max_wait_rounds: int = MAX_WAIT_ROUNDS) -> Selection:
    """Choose ``sender``'s receivers by ``policy`` and record them in ``plan``.

    ``available_mbps`` is every link's available bandwidth (:meth:`LinkMeter.available`);
    randomness (random-p's draw, selmcast's tie-breaks) comes from ``seed``, ``round_`` and the
    sender alone, so a selection can be repeated.
    """
    if policy not in POLICIES:
        raise SelectionError(f"unknown policy {policy!r}; the policies are {', '.join(POLICIES)}.")
    if sender not in wiring.workers:
        raise SelectionError(f"{sender!r} is not a worker; the workers are "
                             f"{', '.join(wiring.workers)}.")
    candidates = [w for w in wiring.workers if w != sender]
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= len(candidates):
        raise SelectionError(f"p must be a whole number from 1 to {len(candidates)} (the other "
                             f"workers), not {p!r}.")
    if not isinstance(size_bytes, int) or size_bytes < 1:
        raise SelectionError(f"size_bytes must be a whole number above 0, not {size_bytes!r}.")
    plan.start(round_)
    rng = random.Random(f"{seed}/{round_}/{sender}")
    links_load, receptions = plan.load(exclude=sender, in_flight=policy == "selmcast")
    rate = {r: min(available_mbps[e] / (1 + links_load[e]) for e in wiring.path(sender, r))
            for r in candidates}

    def time_s(receivers) -> float:
        return size_bytes * 8 / 1e6 / min(rate[r] for r in receivers)

    baseline_s = random_p_expected_s([time_s([r]) for r in candidates], p)
    forced: list[str] = []
    if policy == "broadcast":
        chosen = candidates
    elif policy == "random-p":
        chosen = sorted(rng.sample(candidates, p), key=candidates.index)
    else:
        if policy == "selmcast":
            chosen = _fastest_then_all(candidates, rate, receptions, p, rng)
        else:   # selmcast-p: the deadline of the shortest prefix, so the scan stops at p
            deadline_s = baseline_s if policy == "most-per-second" else 0.0
            chosen = _best_prefix(candidates, rate, receptions, p, deadline_s, time_s, rng)
        forced = [w for w in candidates if w not in chosen and plan.waited(w) >= max_wait_rounds]
        chosen = sorted(chosen + forced, key=candidates.index)
    plan.register(sender, tree_links(wiring, sender, chosen), tuple(chosen))
    return Selection(policy, sender, round_, p, tuple(chosen), time_s(chosen), baseline_s,
                     rate, tuple(forced))


def plan_round(policy: str, senders, p: int, wiring: Wiring, available_mbps: dict[str, float],
               plan: RoundPlan, *, size_bytes: int, round_: int = 0, seed: int = 0,
               max_wait_rounds: int = MAX_WAIT_ROUNDS) -> list[Selection]:
    """The receivers of every sender in ``senders`` for one round on one view, in their order.

    Every policy plans them one after another, each later sender seeing the earlier ones' trees
    as load; ``selmcast`` then plans each again against all the others' trees until no choice
    changes (at most :data:`JOINT_PASSES` passes in all; the module docstring).
    """
    def one(sender: str) -> Selection:
        return select(policy, sender, p, wiring, available_mbps, plan, size_bytes=size_bytes,
                      round_=round_, seed=seed, max_wait_rounds=max_wait_rounds)

    chosen = {sender: one(sender) for sender in senders}
    for _ in range(JOINT_PASSES - 1 if policy == "selmcast" and len(chosen) > 1 else 0):
        again = {sender: one(sender) for sender in senders}
        settled = all(again[s].receivers == chosen[s].receivers for s in senders)
        chosen = again
        if settled:
            break
    return [chosen[s] for s in senders]


def _by_rate(candidates, rate, receptions, rng) -> list[str]:
    """The candidates by falling rate; ties: fewer planned receptions first, then seeded
    random."""
    tie = {r: rng.random() for r in candidates}
    return sorted(candidates, key=lambda r: (-rate[r], receptions[r], tie[r]))


def _fastest_then_all(candidates, rate, receptions, p, rng) -> list[str]:
    """The published rule: the highest rate that serves ``p`` receivers (the ``p``-th largest),
    then every candidate that rate serves; see the module docstring."""
    order = _by_rate(candidates, rate, receptions, rng)
    floor = rate[order[p - 1]] * (1 - RATE_TIE)
    return [r for r in order if rate[r] >= floor]


def _best_prefix(candidates, rate, receptions, p, deadline_s, time_s, rng) -> list[str]:
    """The prefix of the candidates by falling rate that serves the most receivers per second
    within ``deadline_s`` (at least ``p`` of them); see the module docstring."""
    order = _by_rate(candidates, rate, receptions, rng)
    best_k, best_score = p, -1.0
    for k in range(p, len(order) + 1):
        t = time_s(order[:k])
        if k > p and t > deadline_s * (1 + _TIME_SLACK):
            break  # times only grow along the prefix
        score = k / t
        if score >= best_score * (1 - _TIME_SLACK):
            best_k, best_score = k, max(score, best_score)
    return order[:best_k]


def paces(wiring: Wiring, available_mbps: dict[str, float],
          chosen: dict[str, tuple[str, ...]], copies: bool = False) -> dict[str, float]:
    """Each sender's pace, in Mbit/s, once every sender's receivers are known (*our
    interpretation*: an equal share of every link among the transfers that cross it).

    With the switches copying (``copies`` false) a sender's multicast crosses each link of its
    tree once and runs at its most shared link: ``min over e in tree of available(e) / n(e)``,
    ``n(e)`` the trees that cross ``e``. With unicast copies every copy is a transfer of its own
    and ``n(e)`` counts copies (the sender's own link carries all of its ``k``); a sender's copies
    together go ``k`` times the rate of its slowest copy. The selection's ``b(r)`` saw only the
    senders planned before it; this sees the whole round.
    """
    paths = {s: [wiring.path(s, r) for r in receivers] for s, receivers in chosen.items()}
    trees = {s: frozenset(link for path in ps for link in path) for s, ps in paths.items()}
    count: collections.Counter = collections.Counter()
    for s, ps in paths.items():
        count.update([link for path in ps for link in path] if copies else trees[s])
    out = {}
    for s, links in trees.items():
        if not links:
            continue
        per = min(available_mbps[e] / count[e] for e in links)
        out[s] = per * len(paths[s]) if copies else per
    return out


WIRE_FACTOR = 1.06
"""Ethernet frame bytes per payload byte of a parameter message (headers of ~1,400-byte
datagrams); what the switch counters see of ``size_bytes``, roughly."""


def planned_bytes(wiring: Wiring, chosen: dict[str, tuple[str, ...]], size_bytes: int,
                  copies: bool = False) -> dict[str, float]:
    """Bytes on every link when each sender sends ``size_bytes`` to its receivers: once per
    tree link with the switches copying, once per copy per path link with unicast copies."""
    out: collections.Counter = collections.Counter()
    for s, receivers in chosen.items():
        links = [e for r in receivers for e in wiring.path(s, r)] if copies \
            else tree_links(wiring, s, receivers)
        for e in links:
            out[e] += size_bytes * WIRE_FACTOR
    return dict(out)
