"""Named sweeps: frozen grids of run specs that a user starts by name.

A :class:`Plan` is a grid (transports x loss rates x bottleneck rates x seeds) over a base
:class:`~harness.spec.RunSpec` that fixes everything else. Any dimension can be overridden from
the command line (``invoke run-sweep --preset smoke --loss 0,5 --iterations 20``) through
:meth:`Plan.override`.

``smoke`` (the three TCP variants at 0 and 1 % loss) checks that the whole testbed works in a few
minutes: 8 workers, MLP, 40 iterations of batch 32, a 200 Mbit/s bottleneck (one 437 KB gradient
from each of 8 workers needs 0.14 s at that rate, as much again for the parameters back, so an
iteration takes at least 0.28 s) and a 64-packet queue.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from harness.spec import RunSpec, SpecError, parse_scheme


class UnknownPreset(KeyError):
    """The preset name is not defined."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclasses.dataclass(frozen=True)
class Plan:
    """A named grid of runs."""

    name: str
    transports: tuple[str, ...]
    loss_pcts: tuple[float, ...]
    bottleneck_mbps: tuple[float, ...]
    seeds: tuple[int, ...]
    base: RunSpec
    order_seed: int = 0
    delays_ms: tuple[float, ...] = (0.0,)

    def specs(self) -> list[RunSpec]:
        """Every run of the grid, in grid order (the sweep shuffles it).

        ``transports`` holds schemes: a slug, optionally with options (``ltp+filler=zero``).
        """
        out = []
        for scheme, loss, bw, delay, seed in itertools.product(
                self.transports, self.loss_pcts, self.bottleneck_mbps, self.delays_ms, self.seeds):
            slug, options = parse_scheme(scheme)
            out.append(self.base.replace(transport=slug,
                                         transport_options={**self.base.options(), **options},
                                         loss_pct=loss, bottleneck_mbps=bw, delay_ms=delay,
                                         seed=seed))
        return out

    def override(self, **changes: Any) -> Plan:
        """A copy with grid dimensions (``transports``, ``loss_pcts``, ``bottleneck_mbps``,
        ``delays_ms``, ``seeds``, ``order_seed``) or base fields (``iterations``, ``model``, ...)
        replaced."""
        grid = {k: v for k, v in changes.items() if v is not None and k in _GRID_FIELDS}
        base = {k: v for k, v in changes.items() if v is not None and k not in _GRID_FIELDS}
        unknown = sorted(set(base) - {f.name for f in dataclasses.fields(RunSpec)})
        if unknown:
            raise SpecError(f"there is no run parameter named {unknown[0]!r}.")
        for key in ("transports", "loss_pcts", "bottleneck_mbps", "delays_ms", "seeds"):
            if key in grid:
                grid[key] = tuple(grid[key])
                if not grid[key]:
                    raise SpecError(f"{key} needs at least one value.")
        plan = dataclasses.replace(self, **grid)
        if base:
            plan = dataclasses.replace(plan, base=plan.base.replace(**base))
        plan.specs()  # validate every combination now, before anything starts
        return plan


_GRID_FIELDS = {"transports", "loss_pcts", "bottleneck_mbps", "delays_ms", "seeds", "order_seed"}
TCP_VARIANTS = ("tcp-cubic", "tcp-reno", "tcp-bbr")

PRESETS: dict[str, Plan] = {
    "smoke": Plan(
        name="smoke", transports=TCP_VARIANTS, loss_pcts=(0.0, 1.0), bottleneck_mbps=(200.0,),
        seeds=(0,), base=RunSpec(n_workers=8, queue_pkts=64, model="mlp", iterations=40,
                                 eval_every=10, timeout_s=180.0)),
}
DEFAULT_PRESET = "smoke"


def get(name: str) -> Plan:
    """The preset ``name``, or :class:`UnknownPreset` listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPreset(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}.") from None
