"""The report's section on the head-to-head of the field's designs, from the tables.

Drawn when a sweep runs one of the designs of the field beside LTP (``mlt``, ``optireduce``,
``phase-bound``; the ``field`` preset, docs/field.md). A *cell* is a loss model and a regime: the
loss (``replay:5``), and the settings in which the regime differs from the sweep's most common
ones (``+10 ms one way``, ``queue 8``); a *design* is a scheme under its pattern (``optireduce
(ring)`` beside ``ltp (ring)``, the others through the PS).

- ``field_ranking``: one row per cell, one column per scheme; each square the scheme's median
  time to the target accuracy over the cell's fastest median (1.00 = the fastest; a scheme whose
  median run never reached the target shows ``miss``), a star on the cell's winner where the rule
  (:data:`WINNER_RULE`) names one. A reader sees at a glance who is fast where, and where nobody
  separates.

:func:`section` writes "The field head to head": per cell the winner, or that none separates,
with the comparisons made; the findings page (``harness/reporting/publish/claims/field.py``)
adds the full tables.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.reporting import stats
from harness.reporting.tables import Sweep, tta_est, tta_of

FIGURES = (("field_ranking", "time to accuracy of each design relative to the fastest, per "
                             "cell, with the winners the rule names"),)
DESIGNS = ("ltp", "plot", "mlt", "phase-bound", "ltp-reliable", "tcp-cubic-lowrto",
           "optireduce (ring)", "ltp (ring)")
FIELD_ONLY = ("mlt", "optireduce", "phase-bound")
CONTEXT = ("bottleneck_mbps", "delay_ms", "queue_pkts", "n_workers")
WINNER_RULE = ("a cell names a winner only when the scheme with the shortest median time to "
               "the target is faster than every other scheme of the cell beyond noise, paired "
               "by seed (the interval of each per-seed ratio excludes 1); otherwise none "
               "separates")
_WORDS = {"bottleneck_mbps": "{:g} Mbit/s", "delay_ms": "+{:g} ms one way",
          "queue_pkts": "queue {:g}", "n_workers": "{:g} workers"}


def applies(sw: Sweep) -> bool:
    """The sweep runs a design of the field, and its table has the times to target it ranks."""
    return "time_to_target_s" in sw.ok and bool(
        set(sw.ok.scheme.map(lambda s: s.split("+")[0])) & set(FIELD_ONLY))


def cell_labels(ok: pd.DataFrame) -> pd.Series:
    """Each run's cell: its loss, and its regime where it differs from the usual one."""
    usual = {c: ok[c].mode().iloc[0] for c in CONTEXT}

    def one(row) -> str:
        loss = "no loss" if row.loss_pct == 0 else str(row.loss_model)
        return ", ".join([loss, *(_WORDS[c].format(row[c]) for c in CONTEXT
                                  if row[c] != usual[c])])
    return ok.apply(one, axis=1)


def designs(ok: pd.DataFrame) -> pd.Series:
    """Each run's design: its scheme, with its pattern where it is not the PS (``optireduce
    (ring)``): a design is a transport under the pattern it runs."""
    if "pattern" not in ok:
        return ok.scheme.astype(str)
    kind = ok.pattern.fillna("ps").astype(str).str.partition(":")[0]
    return ok.scheme.astype(str).where(kind == "ps", ok.scheme.astype(str) + " (" + kind + ")")


def cells(ok: pd.DataFrame) -> list[str]:
    """The cells of ``ok`` (with its ``cell`` column), no loss first."""
    return sorted(ok.cell.unique(), key=lambda x: (x != "no loss", x))


def order(frame: pd.DataFrame) -> list[str]:
    """The designs present (``design`` column), in :data:`DESIGNS` order first."""
    present = set(frame.design)
    return [s for s in DESIGNS if s in present] + sorted(present - set(DESIGNS))


def winner(c: pd.DataFrame) -> tuple[str, str | None, list[stats.Verdict]]:
    """The cell's fastest median, its winner by :data:`WINNER_RULE` (None: none separates) and
    the comparisons made (the fastest against every other scheme)."""
    schemes = order(c)
    times = {s: tta_est(c[c.design == s]).value for s in schemes}
    best = min(schemes, key=lambda s: (times[s], schemes.index(s)))
    verdicts = [stats.compare(best, tta_of(c[c.design == best]), other,
                              tta_of(c[c.design == other]), higher_is_better=False)
                for other in schemes if other != best]
    wins = bool(verdicts) and all(v.sign == 1 for v in verdicts)
    return best, (best if wins else None), verdicts


def verdict_text(fastest: str, best: str | None, verdicts: list[stats.Verdict],
                 quote=lambda s: f"`{s}`") -> str:
    """What the rule says of a cell: its winner, that none separates (and how many of the
    others the fastest median beat), or that nothing was compared (fewer than
    :data:`~harness.reporting.stats.MIN_RUNS` seeds in common)."""
    if best:
        return f"{quote(best)} wins (faster than each of the {len(verdicts)} others)"
    if verdicts and all(v.sign is None for v in verdicts):
        return f"not compared (fewer than {stats.MIN_RUNS} runs a design)"
    beaten = sum(1 for v in verdicts if v.sign == 1)
    return "none separates" + (
        f" (the fastest median, {quote(fastest)}'s, is faster beyond noise than {beaten} of "
        f"the {len(verdicts)} others)" if verdicts else "")


def frame(sw: Sweep) -> pd.DataFrame:
    """The ok runs with their cell and design."""
    d = sw.ok.copy()
    d["cell"] = cell_labels(d)
    d["design"] = designs(d)
    return d


def section(sw: Sweep) -> list[str]:
    """"The field head to head": a winner, or none, per cell."""
    d = frame(sw)
    lines = ["## The field head to head", "",
             f"Time to the target accuracy per cell ({WINNER_RULE}):", ""]
    with stats.tally() as tally:
        for label in cells(d):
            lines.append(f"- {label}: {verdict_text(*winner(d[d.cell == label]))}.")
    lines += ["", tally.sentence("section"), ""]
    return lines


def draw(sw: Sweep, folder: Path, save) -> list[Path]:
    """Write ``field_ranking``."""
    d = frame(sw)
    rows, cols = cells(d), order(d)
    ratio = np.full((len(rows), len(cols)), np.nan)
    stars = []
    for i, label in enumerate(rows):
        c = d[d.cell == label]
        times = {s: tta_est(c[c.design == s]).value for s in cols if (c.design == s).any()}
        fastest = min(times.values())
        for j, s in enumerate(cols):
            if s in times:
                ratio[i, j] = times[s] / fastest if np.isfinite(fastest) else np.inf
        _, best, _ = winner(c)
        if best:
            stars.append((i, cols.index(best)))
    shown = np.where(np.isfinite(ratio), ratio, np.nan)
    fig, ax = plt.subplots(layout="constrained",
                           figsize=(1.6 + 1.05 * len(cols), 0.9 + 0.45 * len(rows)))
    ax.imshow(np.minimum(shown, 3.0), cmap="viridis_r", vmin=1.0, vmax=3.0, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            text = ("miss" if np.isinf(ratio[i, j]) else
                    "" if np.isnan(ratio[i, j]) else f"{ratio[i, j]:.2f}")
            star = "*" if (i, j) in stars else ""
            ax.text(j, i, text + star, ha="center", va="center", fontsize=7,
                    color="white" if np.isfinite(ratio[i, j]) and ratio[i, j] > 2 else "black")
    ax.set_xticks(range(len(cols)), [sw.names.get(s, s) for s in cols], rotation=30,
                  ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_title("time to target / fastest median in the cell (* the rule's winner)", fontsize=8)
    return save(fig, folder, "field_ranking")
