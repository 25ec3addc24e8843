"""Findings on compressed pushes: what top-k and scaled-sign pushes save on the wire, what they
cost in accuracy and time, and what resetting the residual and local steps change
(``results/compression/``, docs/compression.md).
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (DIFF_RULE, anchor, legend, listed, listing,
                                                     name, phrase, reached_text, runs_of, setting,
                                                     time_fmt, tta_est, tta_of, verdict_text)
from harness.reporting.publish.context import Context, Folder
from harness.reporting.report import counted

COMPRESSION = "results/compression"
COMPRESSION_QUESTION = "What do compressed pushes save, and what do they cost?"
DENSE = ("none", 1)     # (compress, local steps) of the uncompressed single-step run


# ---------------------------------------------------------------- compression

def _setting_of(frame: pd.DataFrame, compress: str, steps: int, reset: int | None = None
                ) -> pd.DataFrame:
    d = frame[(frame.compress == compress) & (frame.local_steps == steps)]
    return d if reset is None or compress == "none" else d[d.error_reset == reset]


def _label(compress: str, steps: int, reset: int | None) -> str:
    out = f"`{compress}`, H={steps:g}"
    if compress != "none" and reset is not None:
        out += ", residual " + ("never reset" if reset == 0 else
                                "dropped every round" if reset == 1 else
                                f"dropped every {reset:g}")
    return out


def _bytes(x: float) -> str:
    return f"{x / 1e6:.2f} MB" if x >= 1e6 else f"{x / 1e3:.1f} KB"


def _switch_per_round(frame: pd.DataFrame) -> pd.Series:
    return (frame.bottleneck_tx_bytes / frame.iterations_done.where(frame.iterations_done > 0))


def _settings(frame: pd.DataFrame) -> list[tuple]:
    keys = frame[["compress", "local_steps", "error_reset"]].drop_duplicates()
    keys = [(c, int(h), int(r)) for c, h, r in keys.itertuples(index=False, name=None)]
    return sorted({(c, h, None if c == "none" else r) for c, h, r in keys},
                  key=lambda k: (k[0] != "none", k[0], k[1], -1 if k[2] is None else k[2]))


def _acc_points(mine: pd.DataFrame, dense: pd.DataFrame) -> stats.Estimate:
    return stats.pair_or_not(runs_of(mine, "final_accuracy", 100),
                             runs_of(dense, "final_accuracy", 100), "diff")


def _acc_word(sign: int | None) -> str:
    return phrase(sign, "more accurate than dense single-step pushes beyond noise",
                  "less accurate than dense single-step pushes beyond noise",
                  "within noise of dense single-step pushes")


def compression_body(ctx: Context) -> list[str]:
    """What compressed pushes save, and what they cost."""
    f = ctx.folder(COMPRESSION)
    ok = f.ok.copy()
    ok["error_reset"] = ok.error_reset.fillna(1).astype(int)
    ok["local_steps"] = ok.local_steps.fillna(1).astype(int)
    ok["compress"] = ok.compress.fillna("none").astype(str)
    target = ok.target_accuracy.median()
    losses = sorted(ok.loss_pct.unique())
    base_loss = losses[0]
    d0 = ok[ok.loss_pct == base_loss]
    dense = _setting_of(d0, *DENSE)
    schemes = listing(name(s) for s in sorted(ok.scheme.unique()))
    shown: list = []
    lines = [f"{schemes}, {setting(ok)}, at {listing(losses)} % random loss; a round is one "
             "synchronisation (H local steps use H batches per worker, so compare settings by "
             "time, not rounds). Settings: compression, local steps H and how often the "
             "error-feedback residual is dropped (docs/compression.md). Bytes per round are what all workers' "
             "pushes of one round cost on the wire as the transports count them (headers and "
             "retransmissions included); *switch* is what the switch's port counters sent "
             "toward the PS per round (pushes plus the acknowledgements of the dense "
             "broadcast). Accuracy differences are in points, against dense single-step pushes "
             "with the same seed.", "",
             f"| loss % | setting | runs | bytes per round | x dense | switch per round "
             f"| iterations/s | final accuracy | points vs dense | time to {target:.0%}, s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for loss in losses:
        d = ok[ok.loss_pct == loss]
        base = _setting_of(d, *DENSE)
        for c, h, r in _settings(d):
            mine = _setting_of(d, c, h, r)
            wire = stats.median_ci(mine.wire_bytes_per_iter)
            ratio = stats.pair_or_not(runs_of(mine, "wire_bytes_per_iter"),
                                      runs_of(base, "wire_bytes_per_iter"))
            sw_est = stats.median_ci(_switch_per_round(mine))
            speed = stats.median_ci(mine.iters_per_s)
            acc = stats.median_ci(mine.final_accuracy)
            pts = _acc_points(mine, base) if (c, h) != DENSE else stats.NO_ESTIMATE
            t = tta_est(mine)
            shown += [wire, speed, acc, t, pts]
            lines.append(f"| {loss:g} | {_label(c, h, r)} | {len(mine)} | {_bytes(wire.value)} "
                         f"| {ratio.fmt('.3f') if (c, h) != DENSE else '1'} "
                         f"| {_bytes(sw_est.value)} | {speed.fmt()} | {acc.fmt('.3f')} "
                         f"| {pts.fmt('+.1f')} | {t.fmt('.1f')} ({reached_text(mine)}) |")
    lines += ["", legend(shown) + " Bytes are medians.", ""]

    # What the bytes and the time per round do, at the first loss rate, residual never reset.
    never = [c for c in sorted(d0.compress.unique()) if c != "none"]
    parts = []
    for c in never:
        mine = _setting_of(d0, c, 1, 0)
        if mine.empty:
            continue
        ratio = stats.paired(runs_of(mine, "wire_bytes_per_iter"),
                             runs_of(dense, "wire_bytes_per_iter"))
        sw_ratio = stats.paired(runs_of(mine, "bottleneck_tx_bytes"),
                                runs_of(dense, "bottleneck_tx_bytes"))
        v = stats.compare(c, runs_of(mine, "iters_per_s"), "dense", runs_of(dense, "iters_per_s"))
        parts.append(f"`{c}` puts {ratio.fmt('.3f', 'x')} of dense pushes' bytes on the wire "
                     f"per round ({_bytes(mine.wire_bytes_per_iter.median())} against "
                     f"{_bytes(dense.wire_bytes_per_iter.median())}) and the switch carries "
                     f"{sw_ratio.fmt('.3f', 'x')} of the bytes toward the PS (the dense "
                     "broadcast's acknowledgements stay); its rounds are "
                     f"{verdict_text(v, 'faster', 'slower')}")
    lines += [f"**Bytes and rounds** at {base_loss:g} % loss, one local step: "
              + "; ".join(parts) + ". The dense broadcast of the parameters is unchanged, so "
              "it is what a compressed round mostly waits for.", ""]

    # Accuracy: never reset, reset every round, local steps.
    lines.append(f"**Accuracy** after {ok.iterations.max():g} rounds at {base_loss:g} % loss "
                 f"(dense single-step pushes: {stats.median_ci(dense.final_accuracy).fmt('.3f')}"
                 f", {time_fmt(tta_est(dense))} s to {target:.0%}, {reached_text(dense)}); "
                 f"{DIFF_RULE}:")
    lines.append("")
    for c, h, r in _settings(d0):
        if (c, h) == DENSE:
            continue
        mine = _setting_of(d0, c, h, r)
        pts = _acc_points(mine, dense)
        sign = stats.judge(pts, 0.0)
        lines.append(f"- {_label(c, h, r)}: {stats.median_ci(mine.final_accuracy).fmt('.3f')}, "
                     f"{pts.fmt('+.1f')} points, {_acc_word(sign)}; "
                     f"{tta_est(mine).fmt('.1f')} s to {target:.0%} ({reached_text(mine)}).")
    parts = []
    for c in never:
        for h in sorted(d0[d0.compress == c].local_steps.unique()):
            kept, reset = _setting_of(d0, c, h, 0), _setting_of(d0, c, h, 1)
            if kept.empty or reset.empty:
                continue
            pts = _acc_points(reset, kept)
            sign = stats.judge(pts, 0.0)
            parts.append(f"`{c}`, H={h:g}: {pts.fmt('+.1f')} points, "
                         + phrase(sign, "more accurate beyond noise",
                                  "less accurate beyond noise"))
    if parts:
        lines += ["", "Dropping the residual every round (`--reset-mode drop`, this project's "
                  "first error reset) against never resetting it, same compression and local "
                  "steps, per seed: " + "; ".join(parts) + ". Dropping throws away what the "
                  "compressor left out, which is how it can cost accuracy; CSER's reset "
                  "synchronises it instead (docs/compression.md, *Error reset: what CSER "
                  "describes and what is built*; the findings' CSER section)."]
    many = d0[d0.local_steps > 1]
    if not many.empty:
        meds = [stats.median_ci(_setting_of(d0, c, h, r).final_accuracy).value
                for c, h, r in _settings(many)]
        lines += ["", f"With {listed(many, 'local_steps')} local steps every "
                  f"setting's median final accuracy lies between {min(meds):.3f} and "
                  f"{max(meds):.3f}, but a round then takes that many batches per worker."]
    lines.append("")

    for loss in losses[1:]:
        d = ok[ok.loss_pct == loss]
        base = _setting_of(d, *DENSE)
        comp = d[d.compress != "none"]
        closes, pushes = int(comp.early_closes.sum()), int(comp.gradient_msgs.sum())
        dense_closes = base.early_closes / base.gradient_msgs
        dropped = comp[comp.compress_dropped > 0]
        drop_text = (f"the PS dropped {int(dropped.compress_dropped.sum())} index-value pairs "
                     f"or sign words missing from them, in {counted(len(dropped), 'run')} ("
                     + listing(sorted(f"`{c}`" for c in dropped.compress.unique())) + ")"
                     if not dropped.empty else "the PS dropped nothing")
        parts = []
        for c in sorted(comp.compress.unique()):
            mine = comp[comp.compress == c]
            w = stats.compare(c, tta_of(mine), "dense", tta_of(base), higher_is_better=False)
            parts.append(f"`{c}` {time_fmt(tta_est(mine))} s ({reached_text(mine)}), "
                         f"{verdict_text(w, 'sooner', 'later')} than dense pushes")
        lines += [f"**At {loss:g} % random loss** ({listing(_names(comp))}, and dense pushes; "
                  f"{len(d)} runs): of {pushes:,} compressed pushes {closes} "
                  f"({closes / pushes:.2%}) closed early and {drop_text}, while dense pushes "
                  f"closed early a median of {base.early_closes.median():.0f} times in "
                  f"{base.gradient_msgs.median():.0f} pushes a run ({dense_closes.median():.1%})"
                  f" and had {base.filled_frac_mean.median():.2%} of each gradient filled. A "
                  "compressed push is a few datagrams and LTP's early-close threshold needs "
                  f"nearly all of them. Time to {target:.0%}: dense pushes "
                  f"{time_fmt(tta_est(base))} s ({reached_text(base)}); " + "; ".join(parts)
                  + ".", ""]
    lines += [f"These are accuracies after {ok.iterations.max():g} rounds, not converged ones.",
              "", f"![accuracy against push bytes](../{COMPRESSION}/figures/"
              "compression_tradeoff.png)"]
    return lines


def _names(comp: pd.DataFrame) -> list[str]:
    return [_label(c, h, r) for c, h, r in
            sorted(set(zip(comp.compress, comp.local_steps, comp.error_reset)))]


def compression_block(ctx: Context) -> str:
    """docs/compression.md's results: the bytes compressed pushes save, where they come from,
    and where the rest of the findings are."""
    f = ctx.folder(COMPRESSION)
    ok = f.ok.copy()
    ok["compress"] = ok.compress.fillna("none").astype(str)
    d0 = ok[ok.loss_pct == ok.loss_pct.min()]
    lossy = sorted(ok.loss_pct.unique())[1:]
    dense = _setting_of(d0, *DENSE)
    shown, parts = [], []
    for c in sorted(d0.compress.unique()):
        if c == "none":
            continue
        mine = _setting_of(d0, c, 1, 0)
        ratio = stats.paired(runs_of(mine, "wire_bytes_per_iter"),
                             runs_of(dense, "wire_bytes_per_iter"))
        shown.append(ratio)
        parts.append(f"`{c}` {ratio.fmt('.3f', 'x')}")
    return "\n".join([
        f"From {f.cite()}; {f.status().rstrip('.')}. Push bytes on the wire per round "
        f"against dense pushes, per seed, one local step, {d0.loss_pct.min():g} % loss: "
        + ", ".join(parts) + ". " + legend(shown), "",
        "What that costs in accuracy and time, setting by setting, with the verdicts"
        + (f" and the runs at {listing(lossy)} % loss" if lossy else "")
        + f": [the findings page](findings.md#{anchor(COMPRESSION_QUESTION)}); every run's "
        "numbers: `results/compression/report.md`."])


BLOCKS = {"compression-results": compression_block}
SECTIONS = [Section("compression", COMPRESSION_QUESTION, (COMPRESSION,), compression_body)]
