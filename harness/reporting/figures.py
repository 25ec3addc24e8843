"""Figures of a sweep, regenerated from its tables alone, with intervals over seeds.

``invoke figures --sweep DIR`` reads the tables (:mod:`harness.reporting.tables`) and writes PNG and
PDF versions under ``DIR/figures/``; every point is the median over a cell's runs with its
distribution-free interval (:mod:`harness.reporting.stats`) as an error bar:

- ``throughput``: iterations/s against loss, and the ratio to ``tcp-cubic``'s median;
- ``accuracy``: time to the target accuracy (runs that never reached it are counted, not drawn)
  and the final accuracy, against loss;
- ``converge``: each scheme's final accuracy minus lossless ``tcp-cubic``'s, with the +-1 point
  band that "no loss of accuracy" is held to;
- ``sync_cdf``: the distribution of per-iteration synchronization time (broadcast + gather), all
  seeds pooled, p50 and p99 marked;
- ``loss_tolerance``: filled fraction, early closes, avoided and actual retransmissions;
- ``bottleneck``: bottleneck utilisation and queue drops;
- ``bounds``: the median iteration split into the full-duplex bound, compute, the PS's update and
  the rest (transport and harness), and the iteration over its floor;
- ``regime_<setting>``: for each setting that varies besides loss (workers, queue, delay, ...),
  ``ltp``, ``ltp-reliable``, ``plot`` and the best TCP against that setting;
- ``faults_tta`` and ``faults_cdf``: time to accuracy per fault and sync mode, and round times
  around a failure, when the sweep has faults or sync modes
  (:mod:`harness.reporting.sections.faults`);
- ``byzantine_accuracy`` under attacks and aggregation rules
  (:mod:`harness.reporting.sections.byzantine`);
- ``compression_tradeoff`` and ``compression_accuracy``: accuracy against push bytes on the
  wire, and over time, per compression setting (:mod:`harness.reporting.sections.compression`).

:mod:`harness.reporting.report` writes ``DIR/report.md`` from the same tables. Only ``ok`` runs are
drawn.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.reporting import sections, stats  # noqa: E402
from harness.reporting.tables import (BASELINE, CONDITION_COLUMNS, OWN_SECTIONS,  # noqa: E402
                                      Sweep, best_tcp, is_tcp, load, reached)

TOLERANT = ("ltp", "ltp-reliable", "plot")
REGIME_AXES = {"n_workers": "workers", "queue_pkts": "bottleneck queue (packets)",
               "delay_ms": "one-way delay added (ms)", "bottleneck_mbps": "bottleneck (Mbit/s)"}


def _save(fig, folder: Path, name: str) -> list[Path]:
    out = []
    for ext in ("png", "pdf"):
        path = folder / f"{name}.{ext}"
        # no creation date in a PDF: the same tables give the same bytes
        fig.savefig(path, dpi=130, bbox_inches="tight",
                    metadata={"CreationDate": None} if ext == "pdf" else None)
        out.append(path)
    plt.close(fig)
    return out


def _legend(ax, size: int) -> None:
    """A legend, if anything in ``ax`` has a label."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size)


def _errorbar(ax, x, est: list[stats.Estimate], sw: Sweep, scheme: str, **kw) -> None:
    med = np.array([e.value for e in est])
    lo = np.array([e.lo for e in est])
    hi = np.array([e.hi for e in est])
    if np.all(np.isnan(med)):
        return
    ax.errorbar(x, med, yerr=[med - lo, hi - med], marker=sw.markers[scheme], ms=4, capsize=2,
                color=sw.palette[scheme], label=sw.names[scheme], lw=1.2, **kw)


def _lines(ax, sw: Sweep, frame: pd.DataFrame, y: str, schemes, x: str = "loss_pct") -> None:
    """Median and interval of ``y`` per value of ``x``, one line per scheme."""
    for scheme in schemes:
        d = frame[frame.scheme == scheme]
        if d.empty or y not in d or d[y].isna().all():
            continue
        xs = sorted(d[x].unique())
        _errorbar(ax, xs, [sw.ci(d[d[x] == v], y) for v in xs], sw, scheme)
    if x == "loss_pct":
        ax.set_xlabel("random loss (%)")


def _grid(n_rows: int, n_cols: int, **kw):
    return plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, 3.2 * n_rows), squeeze=False,
                        layout="constrained", **kw)


def _throughput(sw: Sweep, folder: Path) -> list[Path]:
    conds = sw.conditions()
    fig, axes = _grid(2, len(conds), sharex=True)
    for j, cond in enumerate(conds):
        d = sw.at(sw.ok, cond)
        _lines(axes[0][j], sw, d, "iters_per_s", sw.order)
        axes[0][j].set_title(sw.label(cond))
        axes[0][j].set_ylabel("training throughput (iterations/s)")
        base = d[d.scheme == BASELINE]
        for scheme in sw.order:
            mine = d[d.scheme == scheme]
            xs = sorted(set(mine.loss_pct) & set(base.loss_pct))
            _errorbar(axes[1][j], xs, [sw.ratio(
                stats.by_seed(mine[mine.loss_pct == x], "iters_per_s"),
                stats.by_seed(base[base.loss_pct == x], "iters_per_s")) for x in xs], sw, scheme)
        axes[1][j].axhline(1.0, color="black", lw=0.8, ls=":")
        axes[1][j].set_ylabel(f"throughput / {BASELINE} (per-seed ratio, median)")
        axes[1][j].set_xlabel("random loss (%)")
    _legend(axes[0][0], 7)
    return _save(fig, folder, "throughput")


def _facets(sw: Sweep, folder: Path, name: str, panels) -> list[Path]:
    """One column per condition, one row per (column, y label) panel, lines against loss."""
    conds = sw.conditions()
    fig, axes = _grid(len(panels), len(conds), sharex=True)
    for j, cond in enumerate(conds):
        d = sw.at(sw.ok, cond)
        for i, (y, label) in enumerate(panels):
            _lines(axes[i][j], sw, d, y, sw.order)
            axes[i][j].set_ylabel(label)
        axes[0][j].set_title(sw.label(cond))
    _legend(axes[0][0], 7)
    return _save(fig, folder, name)


def _at_most(value: float, top: float) -> float:
    """``value`` drawn no higher than ``top`` (a "not reached" at the cap; NaN with no cap)."""
    if np.isfinite(top):
        return min(value, top)
    return value if np.isfinite(value) else float("nan")


def _accuracy(sw: Sweep, folder: Path) -> list[Path]:
    """Time to the target accuracy (runs that missed it count as infinitely late; a median or
    bound that is "not reached" is drawn at the training-time cap, on its dashed line) and final
    accuracy, against loss."""
    target = sw.ok.target_accuracy.median()
    conds = sw.conditions()
    fig, axes = _grid(2, len(conds), sharex=True)
    for j, cond in enumerate(conds):
        d = sw.at(sw.ok, cond)
        cap = d.max_train_s.max()
        top = cap if np.isfinite(cap) else d.time_to_target_s.max()
        for scheme in sw.order:
            mine = d[d.scheme == scheme]
            xs = sorted(mine.loss_pct.unique())
            est = [sw.time_to_target(mine[mine.loss_pct == x], scheme) for x in xs]
            drawn = [stats.Estimate(*(_at_most(v, top) for v in (e.value, e.lo, e.hi)), e.n)
                     for e in est]
            _errorbar(axes[0][j], xs, drawn, sw, scheme)
        if np.isfinite(cap) and (~reached(d)).any():
            axes[0][j].axhline(cap, color="black", lw=0.8, ls="--",
                               label="training cap: not reached")
        axes[0][j].set_ylabel(f"time to {target:.0%} test accuracy (s)")
        axes[0][j].set_title(sw.label(cond))
        _lines(axes[1][j], sw, d, "final_accuracy", sw.order)
        axes[1][j].set_ylabel("final test accuracy")
    _legend(axes[0][0], 7)
    return _save(fig, folder, "accuracy")


def _converge(sw: Sweep, folder: Path) -> list[Path]:
    conds = sw.conditions()
    fig, axes = _grid(1, len(conds))
    for j, cond in enumerate(conds):
        d = sw.at(sw.ok, cond)
        ref = d[(d.scheme == BASELINE) & (d.loss_pct == 0)].final_accuracy
        ax = axes[0][j]
        if ref.dropna().empty:
            ax.set_title(f"{sw.label(cond)}: no lossless {BASELINE} run")
            continue
        d = d.assign(acc_gap_pts=100 * (d.final_accuracy - ref.median()))
        _lines(ax, sw, d, "acc_gap_pts", sw.order)
        # Runs the training-time cap stopped have not converged: marked where their cell is.
        capped = d[d.stopped_by == "time_cap"]
        for (scheme, loss), cell in capped.groupby(["scheme", "loss_pct"]):
            ax.annotate("time cap", (loss, cell.acc_gap_pts.median()), xytext=(4, -10),
                        textcoords="offset points", fontsize=7, color=sw.palette[scheme])
        ax.axhspan(-1, 1, color="grey", alpha=0.15, lw=0)
        ax.axhline(0, color="black", lw=0.8, ls=":")
        ax.set_ylabel(f"final accuracy - lossless {BASELINE} (points)")
        ax.set_title(sw.label(cond))
    _legend(axes[0][0], 7)
    return _save(fig, folder, "converge")


def _sync_cdf(sw: Sweep, folder: Path) -> list[Path]:
    # Not the push time alone: a transport that sends the parameters to one worker after another
    # starts the first push long before the last worker has its parameters.
    iters = sw.iters.assign(sync_s=sw.iters.broadcast_s + sw.iters.gather_s)
    iters = iters.merge(sw.ok[["run_id", *sw.varying]].drop_duplicates(), on="run_id",
                        suffixes=("_it", "")) if sw.varying else iters
    conds, losses = sw.conditions(), sorted(iters.loss_pct.unique())
    fig, axes = plt.subplots(len(conds), len(losses), squeeze=False, sharey=True,
                             figsize=(3.2 * len(losses), 2.8 * len(conds)), layout="constrained")
    for i, cond in enumerate(conds):
        for j, loss in enumerate(losses):
            ax = axes[i][j]
            d = sw.at(iters, cond)
            d = d[d.loss_pct == loss]
            for scheme in sw.order:
                x = np.sort(d[d.scheme == scheme].sync_s.dropna().to_numpy())
                if not len(x):
                    continue
                ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post",
                        color=sw.palette[scheme], label=sw.names[scheme])
                for q, mk in ((50, "o"), (99, "v")):
                    ax.plot(np.percentile(x, q), q / 100, mk, color=sw.palette[scheme], ms=4)
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(10, subs=(1, 2, 5)))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_title(f"{sw.label(cond)}, loss {loss:g} %", fontsize=8)
            ax.set_xlabel("synchronization time per iteration (s)")
    axes[0][0].set_ylabel("CDF, seeds pooled (o p50, v p99)")
    _legend(axes[0][0], 6)
    return _save(fig, folder, "sync_cdf")


def _loss_tolerance(sw: Sweep, folder: Path) -> list[Path]:
    panels = (("filled_frac_mean", "mean filled fraction of a gradient"),
              ("early_closes_per_iter", "gradients closed early per iteration"),
              ("retx_avoided_per_iter", "retransmissions avoided per iteration"),
              ("retransmits_per_iter", "retransmitted packets per iteration"))
    fig, axes = _grid(1, len(panels))
    schemes = [s for s in sw.order if not is_tcp(s)] or sw.order
    for ax, (col, label) in zip(axes[0], panels):
        _lines(ax, sw, sw.ok, col, schemes)
        ax.set_ylabel(label)
    _legend(axes[0][0], 7)
    return _save(fig, folder, "loss_tolerance")


def _bottleneck(sw: Sweep, folder: Path) -> list[Path]:
    return _facets(sw, folder, "bottleneck", (("bottleneck_util_frac", "bottleneck utilisation"),
                                              ("queue_drops_per_iter", "queue drops per iteration")))


def _bounds(sw: Sweep, folder: Path) -> list[Path]:
    """Where the median iteration goes, per scheme and loss (first condition's facet each)."""
    conds = sw.conditions()
    fig, axes = _grid(2, len(conds))
    parts = (("fd_bound_s", "full-duplex bound"), ("compute_p50_s", "slowest worker's compute"),
             ("update_p50_s", "PS update"), ("rest_s", "rest: transport and harness"))
    colors = sns.color_palette("muted", len(parts))
    for j, cond in enumerate(conds):
        d = sw.at(sw.ok, cond)
        d = d.assign(rest_s=d.iter_p50_s - d.iter_bound_s)
        cells = d.groupby(["scheme", "loss_pct"])[[p for p, _ in parts]].median().reset_index()
        cells["_o"] = cells.scheme.map({s: i for i, s in enumerate(sw.order)})
        cells = cells.sort_values(["_o", "loss_pct"])
        labels = [f"{sw.names[s]}, {loss:g}%" for s, loss in zip(cells.scheme, cells.loss_pct)]
        bottom = np.zeros(len(cells))
        ax = axes[0][j]
        for (col, name), color in zip(parts, colors):
            vals = cells[col].to_numpy()
            ax.barh(labels, vals, left=bottom, color=color, label=name)
            bottom += np.nan_to_num(vals)
        ax.set_xlabel("median iteration time (s)")
        ax.set_title(sw.label(cond))
        ax.tick_params(axis="y", labelsize=6)
        _lines(axes[1][j], sw, d, "iter_over_bound", sw.order)
        axes[1][j].axhline(1.15, color="black", lw=0.8, ls=":")
        axes[1][j].set_ylabel("iteration p50 / (bound + compute + update)")
    _legend(axes[0][0], 6)
    _legend(axes[1][0], 6)
    return _save(fig, folder, "bounds")


def regime_schemes(sw: Sweep, frame: pd.DataFrame) -> list[str]:
    """What a regime figure compares: ltp, ltp-reliable, plot and the best TCP, where present."""
    out = [s for s in TOLERANT if s in set(frame.scheme)]
    tcp = best_tcp(frame)
    return out + ([tcp] if tcp else [])


def _regime(sw: Sweep, folder: Path, setting: str) -> list[Path]:
    others = [c for c in sw.varying if c != setting]
    losses = sorted(sw.ok.loss_pct.unique())
    rows = [("iters_per_s", "training throughput (iterations/s)"),
            ("iter_p99_s", "iteration p99 (s)")]
    if setting == "n_workers":
        rows.append(("cpu_busy_frac", "machine CPU busy while training"))
    frames = ([sw.ok] if not others else
              [g for _, g in sw.ok.groupby(others)])
    fig, axes = _grid(len(rows), len(losses) * len(frames), sharex=True)
    col = 0
    for frame in frames:
        schemes = regime_schemes(sw, frame)
        for loss in losses:
            d = frame[frame.loss_pct == loss]
            for i, (y, label) in enumerate(rows):
                _lines(axes[i][col], sw, d, y, schemes, x=setting)
                axes[i][col].set_ylabel(label)
                axes[i][col].set_xlabel(REGIME_AXES.get(setting, setting))
            extra = ", ".join(CONDITION_COLUMNS[c].format(frame[c].iloc[0]) for c in others)
            axes[0][col].set_title(f"loss {loss:g} %" + (f", {extra}" if extra else ""), fontsize=8)
            col += 1
    if not pd.api.types.is_numeric_dtype(sw.ok[setting]):   # text (cross traffic): wrap it
        values = sorted(sw.ok[setting].unique())
        for ax in axes[-1]:
            ax.set_xticks(range(len(values)), [str(v).replace(",", ",\n").replace(":", ":\n", 1)
                                               for v in values], fontsize=7)
    _legend(axes[0][0], 7)
    return _save(fig, folder, f"regime_{setting}")


def draw(sw: Sweep) -> list[Path]:
    """Write every figure of ``sw``; return the paths written."""
    folder = sw.folder / "figures"
    folder.mkdir(exist_ok=True)
    sns.set_theme(style="whitegrid", context="paper")
    written = _throughput(sw, folder) + _accuracy(sw, folder) + _converge(sw, folder)
    if not sw.iters.empty:
        written += _sync_cdf(sw, folder)
    written += _loss_tolerance(sw, folder) + _bottleneck(sw, folder) + _bounds(sw, folder)
    for setting in sw.varying:
        if setting not in OWN_SECTIONS:
            written += _regime(sw, folder, setting)
    return written + sections.draw(sw, folder, _save)


def make(folder: Path, figures: bool = True) -> list[Path]:
    """Write the report of the sweep in ``folder`` and, with ``figures``, every figure; return
    the paths written."""
    from harness.reporting import report

    sw = load(folder)
    written = draw(sw) if figures else []
    written.append(report.write(sw))
    return written
