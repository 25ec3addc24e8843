"""Figures and a short report of a sweep, regenerated from its tables alone.

``invoke figures --sweep DIR`` reads ``runs.csv``, ``curves.csv`` and ``iterations.csv`` (never the
raw files) and writes, under ``DIR/figures/``, PNG and PDF versions of

- ``throughput``: training throughput (iterations/s) against loss rate per transport, and its
  ratio to ``tcp-cubic`` under the same conditions;
- ``accuracy``: time to a target accuracy and final accuracy against loss rate;
- ``sync_cdf``: the distribution (CDF) of per-iteration synchronization time per transport (the
  PS's broadcast plus its gather, which spans the workers' compute), p50 and p99 marked;
- ``loss_tolerance``: received fraction and retransmissions against loss rate, for the
  loss-tolerant transports;
- ``bottleneck``: bottleneck utilisation (from the controller's port statistics) and queue drops;

and ``DIR/report.md``: the headline numbers, which regime gives which speedup, and the command
that regenerates every figure. Only runs with status ``ok`` are drawn; the report counts the rest.
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

from harness.results import ResultsError  # noqa: E402
from transports import registry  # noqa: E402

BASELINE = "tcp-cubic"


def _slug(scheme: str) -> str:
    return scheme.split("+", 1)[0]


def _look(schemes):
    """Colour, marker and legend name per scheme: the registry's for a bare slug; for a slug with
    options, the slug's marker with a colour of its own and the options in the name."""
    palette, markers, names = {}, {}, {}
    extra = iter(sns.color_palette("dark", 10).as_hex() + sns.color_palette("pastel", 10).as_hex())
    for scheme in schemes:
        slug = _slug(scheme)
        try:
            info = registry.get(slug)
            color, marker, name = info.color, info.marker, info.display_name
        except registry.UnknownTransport:  # a sweep made by another version
            color, marker, name = "#777777", "x", slug
        if scheme != slug:
            color, name = next(extra, "#444444"), f"{name} ({scheme.split('+', 1)[1]})"
        palette[scheme], markers[scheme], names[scheme] = color, marker, name
    return palette, markers, names


def _save(fig, folder: Path, name: str) -> list[Path]:
    out = []
    for ext in ("png", "pdf"):
        path = folder / f"{name}.{ext}"
        fig.savefig(path, dpi=130, bbox_inches="tight")
        out.append(path)
    plt.close(fig)
    return out


def _conditions(df: pd.DataFrame) -> pd.Series:
    """A facet label per row: bottleneck rate, and the added delay where there is one."""
    delay = df.get("delay_ms", pd.Series(0.0, index=df.index)).fillna(0.0)
    return [f"{bw:g} Mbit/s" + (f", +{d:g} ms one way" if d else "")
            for bw, d in zip(df.bottleneck_mbps, delay)]


def load(sweep: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(all runs, curves of ok runs, iterations of ok runs) of a sweep folder."""
    runs_csv = sweep / "runs.csv"
    if not runs_csv.exists():
        raise ResultsError(f"{runs_csv} does not exist; run a sweep into {sweep} first.")
    runs = pd.read_csv(runs_csv)
    ok_ids = set(runs.loc[runs.status == "ok", "run_id"])
    if not ok_ids:
        raise ResultsError(f"{runs_csv} has no run with status ok to draw.")
    curves = pd.read_csv(sweep / "curves.csv") if (sweep / "curves.csv").exists() else pd.DataFrame()
    iters = (pd.read_csv(sweep / "iterations.csv") if (sweep / "iterations.csv").exists()
             else pd.DataFrame(columns=["run_id"]))
    return runs, curves[curves.run_id.isin(ok_ids)], iters[iters.run_id.isin(ok_ids)]


def target_accuracy(ok: pd.DataFrame) -> float:
    """95 % of the median final accuracy of the loss-free runs (of all runs if none is loss-free)."""
    base = ok[ok.loss_pct == 0] if (ok.loss_pct == 0).any() else ok
    return round(0.95 * float(base.final_accuracy.median()), 3)


def time_to_target(curves: pd.DataFrame, target: float) -> pd.Series:
    """Training time at the PS when each run first reached ``target`` (NaN if it never did)."""
    hit = curves[curves.accuracy >= target].sort_values("time_s")
    return hit.groupby("run_id").time_s.first()


def with_ratio(ok: pd.DataFrame) -> pd.DataFrame:
    """Add ``speedup``: iterations/s over tcp-cubic's at the same bandwidth, loss and seed."""
    keys = ["bottleneck_mbps", "delay_ms", "loss_pct", "seed"]
    base = ok[ok.scheme == BASELINE].groupby(keys).iters_per_s.mean().rename("base_iters_per_s")
    out = ok.join(base, on=keys)
    out["speedup"] = out.iters_per_s / out.base_iters_per_s
    return out


def _lines(ax, data, y, palette, markers, names, order):
    for slug in order:
        d = data[data.scheme == slug].groupby("loss_pct")[y].agg(["mean", "min", "max"])
        if d.empty:
            continue
        ax.plot(d.index, d["mean"], marker=markers[slug], color=palette[slug], label=names[slug])
        if (d["max"] > d["min"]).any():
            ax.fill_between(d.index, d["min"], d["max"], color=palette[slug], alpha=0.15)
    ax.set_xlabel("random loss (%)")


def make(sweep: Path) -> list[Path]:
    """Write every figure and the report; return the paths written."""
    runs, curves, iters = load(sweep)
    ok = with_ratio(runs[runs.status == "ok"].copy())
    ok["cond"] = _conditions(ok)
    iters = iters.assign(cond=_conditions(iters)) if not iters.empty else iters
    folder = sweep / "figures"
    folder.mkdir(exist_ok=True)
    order = [s for s in registry.slugs() if s in set(ok.scheme)]
    order += sorted(set(ok.scheme) - set(order))
    palette, markers, names = _look(order)
    conds = list(dict.fromkeys(ok.sort_values(["bottleneck_mbps", "delay_ms"]).cond))
    sns.set_theme(style="whitegrid", context="paper")
    written = []

    # 1. throughput and speedup
    fig, axes = plt.subplots(2, len(conds), figsize=(4.2 * len(conds), 6.4), squeeze=False,
                             sharex=True, layout="constrained")
    for j, cond in enumerate(conds):
        d = ok[ok.cond == cond]
        _lines(axes[0][j], d, "iters_per_s", palette, markers, names, order)
        axes[0][j].set_title(cond)
        axes[0][j].set_ylabel("training throughput (iterations/s)")
        _lines(axes[1][j], d, "speedup", palette, markers, names, order)
        axes[1][j].axhline(1.0, color="black", lw=0.8, ls=":")
        axes[1][j].set_ylabel(f"throughput / {BASELINE}")
    axes[0][0].legend(fontsize=7)
    written += _save(fig, folder, "throughput")

    # 2. time to target and final accuracy
    target = target_accuracy(ok)
    ok["time_to_target_s"] = ok.run_id.map(time_to_target(curves, target))
    fig, axes = plt.subplots(2, len(conds), figsize=(4.2 * len(conds), 6.4), squeeze=False,
                             sharex=True, layout="constrained")
    for j, cond in enumerate(conds):
        d = ok[ok.cond == cond]
        _lines(axes[0][j], d, "time_to_target_s", palette, markers, names, order)
        axes[0][j].set_ylabel(f"time to {target:.1%} test accuracy (s)")
        axes[0][j].set_title(cond)
        _lines(axes[1][j], d, "final_accuracy", palette, markers, names, order)
        axes[1][j].set_ylabel("final test accuracy")
    axes[0][0].legend(fontsize=7)
    written += _save(fig, folder, "accuracy")

    # 3. CDF of per-iteration synchronization time. Not the push time alone: a transport that
    # sends the parameters to one worker after another (LTP's serial schedule) starts the first
    # push long before the last worker has its parameters, so only the whole exchange compares.
    if not iters.empty:
        iters = iters.assign(sync_s=iters.broadcast_s + iters.gather_s)
        losses = sorted(iters.loss_pct.unique())
        fig, axes = plt.subplots(len(conds), len(losses), squeeze=False, sharey=True,
                                 figsize=(3.2 * len(losses), 2.8 * len(conds)), layout="constrained")
        for i, cond in enumerate(conds):
            for j, loss in enumerate(losses):
                ax = axes[i][j]
                d = iters[(iters.cond == cond) & (iters.loss_pct == loss)]
                for slug in order:
                    x = np.sort(d[d.scheme == slug].sync_s.dropna().to_numpy())
                    if not len(x):
                        continue
                    ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post",
                            color=palette[slug], label=names[slug])
                    for q, mk in ((50, "o"), (99, "v")):
                        ax.plot(np.percentile(x, q), q / 100, mk, color=palette[slug], ms=4)
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(10, subs=(1, 2, 5)))
                ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
                ax.set_title(f"{cond}, loss {loss:g} %", fontsize=8)
                ax.set_xlabel("synchronization time per iteration (s)")
        axes[0][0].set_ylabel("CDF (o p50, v p99)")
        axes[0][0].legend(fontsize=6)
        written += _save(fig, folder, "sync_cdf")

    # 4. loss tolerance: received fraction and retransmissions
    tolerant = [s for s in order
                if _slug(s) in registry.slugs() and registry.get(_slug(s)).loss_tolerant]
    if tolerant:
        d = ok[ok.scheme.isin(tolerant)]
        fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.2), layout="constrained")
        _lines(axes[0], d, "mean_recv_frac", palette, markers, names, tolerant)
        axes[0].set_ylabel("mean received fraction of a gradient")
        per_iter = d.assign(retx_per_iter=d.retransmits / d.iterations_done)
        _lines(axes[1], per_iter, "retx_per_iter", palette, markers, names, tolerant)
        axes[1].set_ylabel("retransmitted packets per iteration")
        axes[0].legend(fontsize=7)
        written += _save(fig, folder, "loss_tolerance")

    # 5. bottleneck utilisation and queue drops
    fig, axes = plt.subplots(2, len(conds), figsize=(4.2 * len(conds), 6.4), squeeze=False,
                             sharex=True, layout="constrained")
    for j, cond in enumerate(conds):
        d = ok[ok.cond == cond].assign(
            drops_per_iter=lambda x: x.queue_drops / x.iterations_done)
        _lines(axes[0][j], d, "bottleneck_util_frac", palette, markers, names, order)
        axes[0][j].set_ylabel("bottleneck utilisation")
        axes[0][j].set_title(cond)
        _lines(axes[1][j], d, "drops_per_iter", palette, markers, names, order)
        axes[1][j].set_ylabel("queue drops per iteration")
    axes[0][0].legend(fontsize=7)
    written += _save(fig, folder, "bottleneck")

    report = sweep / "report.md"
    report.write_text(_report(sweep, runs, ok, order, names, target))
    written.append(report)
    return written


def _baseline_acc(t: pd.DataFrame, bw: float, delay: float, loss: float) -> float:
    rows = t[(t.scheme == BASELINE) & (t.bottleneck_mbps == bw) & (t.delay_ms == delay)
             & (t.loss_pct == loss)]
    return float(rows.final_accuracy.mean())


def _report(sweep: Path, runs: pd.DataFrame, ok: pd.DataFrame, order, names, target) -> str:
    cmd = f".venv/bin/invoke figures --sweep {sweep}"
    lines = [f"# Report: {sweep.name}", "",
             f"{len(runs)} runs, {len(ok)} ok"
             + "".join(f", {n} {s}" for s, n in runs.status.value_counts().items() if s != "ok")
             + ". Every figure below is regenerated from the tables by:", "", f"    {cmd}", ""]
    group = ["bottleneck_mbps", "delay_ms", "loss_pct", "scheme"]
    t = ok.groupby(group).agg(
        runs=("run_id", "count"), iters_per_s=("iters_per_s", "mean"),
        speedup=("speedup", "mean"), final_accuracy=("final_accuracy", "mean"),
        iter_p50_s=("iter_p50_s", "mean"), iter_p99_s=("iter_p99_s", "mean"),
        measured_loss_pct=("measured_loss_pct", "mean"),
        recv_frac=("mean_recv_frac", "mean")).reset_index()
    lines += ["## Headline numbers (means over seeds)", "",
              "| Mbit/s | delay ms | loss % | transport | runs | it/s | vs tcp-cubic | final acc. | "
              "iteration p50 s | p99 s | measured loss % | received frac. |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rank = {s: i for i, s in enumerate(order)}
    t["_o"] = t.scheme.map(rank)
    for _, r in t.sort_values(["bottleneck_mbps", "delay_ms", "loss_pct", "_o"]).iterrows():
        sp = "" if pd.isna(r.speedup) else f"{r.speedup:.2f}x"
        lines.append(f"| {r.bottleneck_mbps:g} | {r.delay_ms:g} | {r.loss_pct:g} | "
                     f"{names.get(r.scheme, r.scheme)}"
                     f" | {r.runs} | {r.iters_per_s:.2f} | {sp} | {r.final_accuracy:.3f} | "
                     f"{r.iter_p50_s:.3f} | {r.iter_p99_s:.3f} | {r.measured_loss_pct:.2f} | "
                     f"{r.recv_frac:.3f} |")
    lines += ["", "## Which regime gives which speedup", ""]
    if BASELINE in set(ok.scheme):
        others = t[(t.scheme != BASELINE) & t.speedup.notna()]
        for (bw, delay, loss), d in others.groupby(["bottleneck_mbps", "delay_ms", "loss_pct"]):
            best = d.loc[d.speedup.idxmax()]
            where = f"{bw:g} Mbit/s" + (f", +{delay:g} ms one way" if delay else "")
            lines.append(f"- {where}, {loss:g} % loss: best is "
                         f"{names.get(best.scheme, best.scheme)} at {best.speedup:.2f}x "
                         f"{BASELINE}'s throughput (final accuracy {best.final_accuracy:.3f} vs "
                         f"{_baseline_acc(t, bw, delay, loss):.3f}).")
    else:
        lines.append(f"- no {BASELINE} runs in this sweep, so no speedups.")
    lines += ["", f"Time to target uses a target of {target:.1%} test accuracy (95 % of the median "
              "final accuracy of the loss-free runs).", "", "## Figures", ""]
    for name, what in (("throughput", "training throughput and ratio to tcp-cubic vs loss"),
                       ("accuracy", "time to target accuracy and final accuracy vs loss"),
                       ("sync_cdf", "CDF of per-iteration synchronization time (p50 o, p99 v)"),
                       ("loss_tolerance", "received fraction and retransmissions vs loss"),
                       ("bottleneck", "bottleneck utilisation and queue drops vs loss")):
        if (sweep / "figures" / f"{name}.png").exists():
            lines += [f"### {what}", "", f"![{name}](figures/{name}.png)", "",
                      f"`figures/{name}.png` and `.pdf`, from `{cmd}`", ""]
    return "\n".join(lines)
