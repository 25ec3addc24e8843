"""Figures and the scaling summary of a simulated sweep (:mod:`harness.simulation.driver`), from its tables.

``draw(folder)`` writes under ``folder/figures/`` (PNG):

- ``push_vs_workers``: the median push time (over every iteration of every seed, with its
  order-statistic interval) against N, one line per scheme, one panel per link rate, and the physical
  bound ``N x gradient frames / link rate``;
- ``iteration_vs_workers``: the same for the iteration time (broadcast, compute, push, update);
- ``push_vs_bandwidth``: push time over its bound against the link rate, one panel per N;
- ``sim_cost``: the simulator's own events per second and peak memory against N.

``crossovers(frame)`` states, per link rate and pair of schemes, the N at which their median
push times change order (or that they never do in the range), as rows of ``crossovers.csv``.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.reporting import stats  # noqa: E402
from harness.running.results import read_table  # noqa: E402
from harness.simulation.driver import gradient_bytes  # noqa: E402
from transports import registry  # noqa: E402



def frame_bytes() -> int:
    """The bytes a push puts on the wire at least: the gradient in 1,420-byte chunks, each a
    DATA frame of (chunk + 52 header + 8 MAC + 42 Ethernet/IP/UDP) bytes, the last one shorter."""
    return gradient_bytes() + math.ceil(gradient_bytes() / 1420) * (52 + 8 + 42)



def _save(fig, path: Path) -> Path:
    """Lay out, write at 120 dpi and close ``fig``; return ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

def bound_s(n_workers, mbps):
    """The physical bound of a synchronized push: every worker's frames through the link."""
    return np.asarray(n_workers) * frame_bytes() * 8 / (np.asarray(mbps) * 1e6)


def _style(slug: str) -> dict:
    try:
        info = registry.get(slug)
        return {"color": info.color, "marker": info.marker, "label": info.display_name}
    except Exception:   # the TCP reference model is not a registered scheme
        return {"color": "#7f7f7f", "marker": "s", "label": slug}


def medians(frame: pd.DataFrame, keys: list[str], column: str) -> pd.DataFrame:
    """Per group of ``keys``: the median of ``column`` with its interval, count and the
    interval's coverage."""
    rows = []
    for key, group in frame.groupby(keys):
        est = stats.median_ci(group[column].to_numpy())
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))),
                     "median": est.value, "lo": est.lo, "hi": est.hi, "n": est.n,
                     "coverage": est.coverage})
    return pd.DataFrame(rows)


def _panels(frame: pd.DataFrame, column: str, ylabel: str, folder: Path, name: str) -> Path:
    rates = sorted(frame["bottleneck_mbps"].unique())
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4), squeeze=False)
    med = medians(frame, ["bottleneck_mbps", "transport", "n_workers"], column)
    for ax, rate in zip(axes[0], rates):
        for slug, g in med[med["bottleneck_mbps"] == rate].groupby("transport"):
            g = g.sort_values("n_workers")
            ax.errorbar(g["n_workers"], g["median"], yerr=[g["median"] - g["lo"], g["hi"] - g["median"]],
                        capsize=3, **_style(slug))
        ns = np.array(sorted(frame["n_workers"].unique()))
        if column == "push_s":
            ax.plot(ns, bound_s(ns, rate), "k:", label="bound (frames / rate)")
        ax.set(xscale="log", yscale="log", xlabel="workers N", ylabel=ylabel, title=f"{rate:g} Mbit/s")
        ax.legend(fontsize=8)
    return _save(fig, folder / f"{name}.png")


def _vs_bandwidth(frame: pd.DataFrame, folder: Path) -> Path | None:
    if frame["bottleneck_mbps"].nunique() < 2:
        return None
    frame = frame.assign(over_bound=frame["push_s"] / bound_s(frame["n_workers"], frame["bottleneck_mbps"]))
    ns = sorted(frame["n_workers"].unique())
    fig, axes = plt.subplots(1, len(ns), figsize=(4 * len(ns), 4), squeeze=False)
    med = medians(frame, ["n_workers", "transport", "bottleneck_mbps"], "over_bound")
    for ax, n in zip(axes[0], ns):
        for slug, g in med[med["n_workers"] == n].groupby("transport"):
            g = g.sort_values("bottleneck_mbps")
            ax.errorbar(g["bottleneck_mbps"], g["median"], yerr=[g["median"] - g["lo"], g["hi"] - g["median"]],
                        capsize=3, **_style(slug))
        ax.axhline(1.0, color="k", ls=":")
        ax.set(xscale="log", xlabel="link rate (Mbit/s)", ylabel="push time / bound", title=f"N = {n}")
        ax.legend(fontsize=8)
    return _save(fig, folder / "push_vs_bandwidth.png")


def _cost(runs: pd.DataFrame, folder: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for slug, g in runs.groupby("transport"):
        g = g.groupby("n_workers")[["events_per_s", "peak_rss_mb"]].median().reset_index()
        axes[0].plot(g["n_workers"], g["events_per_s"], **_style(slug))
        axes[1].plot(g["n_workers"], g["peak_rss_mb"], **_style(slug))
    axes[0].set(xscale="log", yscale="log", xlabel="workers N", ylabel="events per second (wall)")
    axes[1].set(xscale="log", xlabel="workers N", ylabel="peak memory (MB, max RSS)")
    for ax in axes:
        ax.legend(fontsize=8)
    return _save(fig, folder / "sim_cost.png")


def crossovers(frame: pd.DataFrame) -> pd.DataFrame:
    """Per link rate and pair of schemes: where their median push times change order in N.

    A change counts only where the intervals separate on both sides; otherwise the pair is
    "within noise" there.
    """
    med = medians(frame, ["bottleneck_mbps", "transport", "n_workers"], "push_s")
    rows = []
    for rate, g in med.groupby("bottleneck_mbps"):
        schemes = sorted(g["transport"].unique())
        for i, a in enumerate(schemes):
            for b in schemes[i + 1:]:
                ga = g[g["transport"] == a].set_index("n_workers")
                gb = g[g["transport"] == b].set_index("n_workers")
                ns = sorted(set(ga.index) & set(gb.index))
                order = []
                for n in ns:
                    if ga.loc[n, "hi"] < gb.loc[n, "lo"]:
                        order.append((n, a))
                    elif gb.loc[n, "hi"] < ga.loc[n, "lo"]:
                        order.append((n, b))
                    else:
                        order.append((n, None))
                faster = [f for _, f in order if f]
                change = [(order[k - 1][0], n) for k, (n, f) in enumerate(order)
                          if k and f and any(f2 and f2 != f for _, f2 in order[:k])]
                rows.append({"bottleneck_mbps": rate, "a": a, "b": b,
                             "faster_by_n": ";".join(f"{n}:{f or 'noise'}" for n, f in order),
                             "crossover_between_n": ";".join(f"{x}-{y}" for x, y in change) or
                             ("none: " + (faster[0] if faster and len(set(faster)) == 1 else "within noise"))})
    return pd.DataFrame(rows)


def draw(folder: Path) -> list[Path]:
    """Every figure of the sweep in ``folder`` (and ``crossovers.csv``); their paths."""
    out = folder / "figures"
    out.mkdir(exist_ok=True)
    runs = read_table(folder / "runs.csv")
    ok = runs[runs["status"] == "ok"]
    if ok.empty:   # failed runs stay in the tables; there is nothing to draw
        return []
    keys = ["transport", "n_workers", "bottleneck_mbps", "seed", "loss", "delay_ms", "queue_pkts"]
    its = read_table(folder / "iterations.csv").merge(ok[keys], on=keys)
    paths = [_panels(its, "push_s", "push time (s)", out, "push_vs_workers"),
             _panels(its, "iteration_s", "iteration time (s)", out, "iteration_vs_workers"),
             _cost(ok, out)]
    extra = _vs_bandwidth(its, out)
    if extra:
        paths.append(extra)
    cross = crossovers(its)
    cross.to_csv(folder / "crossovers.csv", index=False)
    paths.append(folder / "crossovers.csv")
    return paths
