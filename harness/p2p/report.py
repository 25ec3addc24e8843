"""The tables, figures and report of a peer-to-peer sweep, from ``runs.csv`` and ``curves.csv``.

Every cell is a method (``policy/copy/scheme``) under a synchronisation mode and loss rate,
summarised over its seeds by the median and a distribution-free interval
(:mod:`harness.reporting.stats`). The report (``report.md``) has:

- the cell table: per-round synchronisation time, round time, achieved average p, delivered p,
  bytes on the leaf-spine links per round, final accuracy of the averaged model, the peers'
  spread, and time to accuracy;
- the comparisons the issue asks for, each one sentence that names a winner only where the
  intervals separate: random-p against selmcast, selmcast-p and broadcast (synchronisation
  time, average p, bytes, accuracy, time to accuracy, a run that never reached the target
  counting as infinitely late), switch groups against unicast copies (bytes on the trunks,
  synchronisation time),
  BSP against SSP, and the loss-tolerant UDP transport against TCP copies.

Figures (``figures/``): ``p2p_sync`` (synchronisation time per round, and average p, per
method, with intervals), ``p2p_bytes`` (trunk bytes per round) and ``p2p_accuracy`` (the mean
peer accuracy over training time, median over seeds, the seeds' range shaded).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.reporting import stats  # noqa: E402
from harness.running.results import read_table  # noqa: E402

METRICS = (  # column, title, format, higher is better
    ("sync_s", "sync s/round", ".3f", False),
    ("round_s", "round s", ".3f", False),
    ("avg_p", "avg p", ".2f", True),
    ("delivered_p", "delivered p", ".2f", True),
    ("trunk_bytes_per_round", "trunk MB/round", ".2f", False),
    ("final_accuracy", "accuracy (avg model)", ".3f", True),
    ("tta_s", "time to target s", ".1f", False),
)
CELL = ["method", "sync", "loss_pct"]


def is_p2p(folder: Path) -> bool:
    """Whether ``folder`` holds a peer-to-peer sweep (its runs.csv has the peer-to-peer columns)."""
    from harness.running import results

    path = folder / "runs.csv"
    if not path.exists():
        return False
    with open(path) as f:
        header = f.readline().strip().split(",")
    return header == results.names(results.P2P_COLUMNS)


def load(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ok runs, their curves)."""
    runs = read_table(folder / "runs.csv")
    curves = read_table(folder / "curves.csv") if (folder / "curves.csv").exists() \
        else pd.DataFrame()
    ok = runs[runs.status == "ok"].copy()
    ok["trunk_bytes_per_round"] = ok["trunk_bytes_per_round"] / 1e6
    return ok, curves[curves.run_id.isin(ok.run_id)] if len(curves) else curves


def _est(frame: pd.DataFrame, column: str) -> stats.Estimate:
    if column == "tta_s":   # a run that never reached the target counts as infinitely late
        return stats.censored_median_ci(frame[column].fillna(0.0), frame[column].notna())
    return stats.median_ci(frame[column])


def _series(frame: pd.DataFrame, column: str) -> pd.Series:
    """``column`` by seed (a run that never reached the target: infinitely late)."""
    values = frame[column].astype(float)
    if column == "tta_s":
        values = values.fillna(float("inf"))
    return pd.Series(values.to_numpy(), index=frame.seed.to_numpy())


def _cell(ok: pd.DataFrame, **where) -> pd.DataFrame:
    mask = np.ones(len(ok), dtype=bool)
    for k, v in where.items():
        mask &= (ok[k] == v).to_numpy()
    return ok[mask]


def table(ok: pd.DataFrame) -> list[str]:
    """The cell table, Markdown."""
    head = ["method", "sync", "loss %", "runs"] + [m[1] for m in METRICS] + ["peer acc range"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (method, sync, loss), g in ok.groupby(CELL, sort=True):
        cells = [method, sync, f"{loss:g}", str(len(g))]
        cells += [_est(g, col).fmt(fmt) for col, _, fmt, _ in METRICS]
        cells.append(f"{g.peer_acc_min.min():.3f}-{g.peer_acc_max.max():.3f}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def comparisons(ok: pd.DataFrame) -> list[str]:
    """One sentence per comparison the sweep can make."""
    out = []

    def pair(title: str, a: dict, b: dict, columns) -> None:
        ca, cb = _cell(ok, **a), _cell(ok, **b)
        if ca.empty or cb.empty:
            return
        name_a = "/".join(str(v) for v in a.values())
        name_b = "/".join(str(v) for v in b.values())
        out.append(f"**{title}**")
        out.append("")
        for col, label, fmt, higher in METRICS:
            if col in columns:
                out.append(f"- {label}: " + stats.compare(
                    name_a, _series(ca, col), name_b, _series(cb, col), higher, fmt).sentence)
        out.append("")

    for sync in sorted(ok.sync.unique()):
        for copy in sorted(ok["copy"].unique()):
            for scheme in sorted(ok.scheme.unique()):
                base = {"copy": copy, "scheme": scheme, "sync": sync}
                for policy in ("selmcast", "most-per-second", "selmcast-p", "broadcast"):
                    pair(f"random-p against {policy} ({copy} copies, {scheme}, {sync})",
                         {"policy": "random-p", **base}, {"policy": policy, **base},
                         ("sync_s", "round_s", "avg_p", "trunk_bytes_per_round",
                          "final_accuracy", "tta_s"))
    for policy in ("random-p", "selmcast"):
        pair(f"switch groups against unicast copies ({policy}, mcast, bsp)",
             {"policy": policy, "copy": "switch", "scheme": "mcast", "sync": "bsp"},
             {"policy": policy, "copy": "unicast", "scheme": "mcast", "sync": "bsp"},
             ("sync_s", "trunk_bytes_per_round"))
        pair(f"BSP against SSP:2 ({policy}, switch, mcast)",
             {"policy": policy, "copy": "switch", "scheme": "mcast", "sync": "bsp"},
             {"policy": policy, "copy": "switch", "scheme": "mcast", "sync": "ssp:2"},
             ("sync_s", "round_s", "final_accuracy", "tta_s"))
        pair(f"UDP copies against TCP copies ({policy}, unicast, bsp)",
             {"policy": policy, "copy": "unicast", "scheme": "mcast", "sync": "bsp"},
             {"policy": policy, "copy": "unicast", "scheme": "tcp", "sync": "bsp"},
             ("sync_s", "final_accuracy"))
    return out


def figures(ok: pd.DataFrame, curves: pd.DataFrame, folder: Path) -> list[Path]:
    """Write the figures; return their paths."""
    out_dir = folder / "figures"
    out_dir.mkdir(exist_ok=True)
    paths = []
    labels = sorted(ok.groupby(["method", "sync"]).groups, key=str)
    names = [f"{m}\n{s}" for m, s in labels]
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 0.8 * len(labels)), 7.5), sharex=True,
                             layout="constrained")
    for ax, (col, title) in zip(axes, (("sync_s", "synchronisation time per round (s)"),
                                       ("avg_p", "achieved average p (receivers)"))):
        for i, key in enumerate(labels):
            g = _cell(ok, method=key[0], sync=key[1])
            e = _est(g, col)
            ax.errorbar([i], [e.value], yerr=[[e.value - e.lo], [e.hi - e.value]], fmt="o",
                        capsize=4, color=plt.get_cmap("tab10").colors[i % 10])
            ax.scatter([i] * len(g), g[col], s=10, color="grey", alpha=0.6, zorder=0)
        ax.set_xticks(range(len(labels)), names, rotation=60, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("median over seeds, order-statistic interval; grey: single runs", fontsize=8)
    paths.append(out_dir / "p2p_sync.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels)), 3.6), layout="constrained")
    for i, key in enumerate(labels):
        g = _cell(ok, method=key[0], sync=key[1])
        e = _est(g, "trunk_bytes_per_round")
        ax.bar([i], [e.value], yerr=[[e.value - e.lo], [e.hi - e.value]], capsize=4,
               color=plt.get_cmap("tab10").colors[i % 10])
    ax.set_xticks(range(len(labels)), names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("MB on the leaf-spine links per round")
    paths.append(out_dir / "p2p_bytes.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    if len(curves):
        fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
        merged = curves.merge(ok[["run_id", "method", "sync"]], on="run_id")
        for i, key in enumerate(labels):
            g = merged[(merged.method == key[0]) & (merged.sync == key[1])]
            by = g.groupby("round").agg(t=("t_s", "median"), acc=("acc_mean", "median"),
                                        lo=("acc_mean", "min"), hi=("acc_mean", "max"))
            colour = plt.get_cmap("tab10").colors[i % 10]
            ax.plot(by.t, by.acc, marker=".", label=f"{key[0]} {key[1]}", color=colour)
            ax.fill_between(by.t, by.lo, by.hi, alpha=0.15, color=colour)
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("mean of the peers' test accuracy")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        paths.append(out_dir / "p2p_accuracy.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def report_text(folder: Path) -> str:
    """The report of the sweep in ``folder``, from its tables (its figures must exist)."""
    from harness.reporting.report import seed_text
    from harness.reporting.sections import captures
    from harness.running import provenance

    ok, curves = load(folder)
    if ok.empty:
        return "# Peer-to-peer sweep\n\nNo run finished ok: nothing to report.\n"
    figs = sorted((folder / "figures").glob("*.png"))
    first = ok.iloc[0]
    with stats.tally() as tally:
        cells, compared = table(ok), comparisons(ok)
    shown = [_est(g, col) for _, g in ok.groupby(CELL, sort=True) for col, *_ in METRICS]
    commits = sorted(set(ok.git_commit.astype(str)))
    lines = [
        "# Peer-to-peer training with selective multicast",
        "",
        provenance.freshness(folder).text(),
        "",
        f"{len(ok)} runs (seeds {seed_text(sorted(int(s) for s in ok.seed.unique()))}) of "
        f"{int(first.n_workers)} peers on a leaf-spine fabric: {int(first.n_slow)} peers at "
        f"{first.slow_frac:g} of {first.access_mbps:g} Mbit/s, uplinks {first.uplink_mbps:g} "
        f"Mbit/s, p = {int(first.p)}, {int(first.rounds)} rounds; commit "
        f"{', '.join(c[:7] for c in commits)}. Each cell: the median over seeds [interval]. "
        + stats.intervals_legend(shown) + " Verdicts: " + stats.RULE + ". " + tally.sentence()
        + " Columns are described in docs/p2p.md.",
        "",
        "## Per cell",
        "",
        *cells,
        "",
        "## Comparisons",
        "",
        *compared,
        *captures.lines(folder, {str(r.run_id): f"{r.method} {r.sync} seed {int(r.seed)}"
                                 for r in ok.itertuples()}),
        "## Figures",
        "",
        *[f"![{p.stem}](figures/{p.name})" for p in figs],
        "",
    ]
    return "\n".join(lines)


def draw(folder: Path) -> list[Path]:
    """Write the figures of the sweep in ``folder``; return their paths."""
    ok, curves = load(folder)
    return figures(ok, curves, folder) if not ok.empty else []


def write(folder: Path, figures: bool = True) -> Path:
    """Write ``report.md`` of the sweep in ``folder`` (and, with ``figures``, its figures);
    return the report."""
    if figures:
        draw(folder)
    path = folder / "report.md"
    path.write_text(report_text(folder))
    return path
