"""What each lab's own sweep measured: the block under a lab page's "What you should observe".

Lab N's folder is ``results/labs/labN``: the page's main ``run-sweep`` command (the first one its
"Commands" section gives) with ``--out`` there, run at the project's code, at seeds 0-2 (a
student's command runs seed 0 alone, to keep a lab short). The block cites the
folder (runs, seeds, commits, fresh or stale), gives per cell the median over its seeds and the
lowest and highest (a range, not an interval) of the columns the page's statements are about,
and prints what the lab checker (:mod:`harness.reporting.labs`) says of each statement on that
folder, with the numbers it compared: what a student's own sweep should land near. A page whose
folder is not there says how to fill it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pandas as pd

from harness.reporting.labs import grading
from harness.reporting.publish.context import Context, MissingFolder
from harness.reporting.report import counted
from transports.base import UserError

FOLDER = "results/labs/lab{n}"
PAGES = "docs/labs"

# Per lab, the runs.csv columns its statements are about: (column, what it is, format).
COLUMNS: dict[int, tuple[tuple[str, str, str], ...]] = {
    1: (("iters_per_s", "iterations/s", ".2f"), ("push_p50_s", "median push (s)", ".3f"),
        ("push_p99_s", "p99 push (s)", ".3f"), ("queue_drops", "queue drops", ".0f"),
        ("retransmits", "retransmissions", ".0f")),
    2: (("iters_per_s", "iterations/s", ".2f"), ("early_closes", "early closes", ".0f"),
        ("min_recv_frac", "least received", ".3f"), ("filled_frac_mean", "filled", ".4f"),
        ("final_accuracy", "accuracy", ".3f")),
    3: (("mean_recv_frac", "received", ".3f"), ("queue_drops", "queue drops", ".0f"),
        ("iters_per_s", "iterations/s", ".2f")),
    4: (("detection_s", "detection (s)", ".2f"), ("iterations_lost", "iterations lost", ".0f"),
        ("rejoin_s", "rejoin (s)", ".2f"), ("final_accuracy", "accuracy", ".3f")),
    5: (("final_accuracy", "accuracy", ".3f"), ("byzantine_kept", "attacks kept", ".0f"),
        ("honest_rejected", "honest rejected", ".0f")),
    6: (("round_s", "round (s)", ".3f"), ("delivered_p", "delivered share", ".3f"),
        ("trunk_bytes_per_round", "trunk bytes/round", ".3g"),
        ("final_accuracy", "accuracy", ".3f")),
    7: (("iter_p50_s", "median iteration (s)", ".3f"), ("iter_over_bound", "over the floor",
                                                       ".2f"),
        ("bottleneck_tx_bytes", "bytes through the PS's link", ".3g")),
    8: (("iters_per_s", "iterations/s", ".2f"), ("early_closes", "early closes", ".0f"),
        ("filled_frac_mean", "filled", ".4f"), ("final_accuracy", "accuracy", ".3f")),
    9: (("early_closes", "early closes", ".0f"), ("max_wait_closes", "max-wait closes", ".0f"),
        ("filled_frac_mean", "filled", ".4f")),
}
# The columns a cell is told apart by, where a lab's sweep varies them.
CELL = ("scheme", "method", "policy", "pattern", "loss_pct", "n_workers", "fault", "byzantine",
        "aggregator", "sync", "delay_ms", "bottleneck_mbps")
SHOWN = 3       # a statement's distinct checks printed in full (its wrong ones first)


def preset_seeds(n: int) -> list[int]:
    """The seeds lab ``n``'s preset runs (a student's command: one seed, to keep it short)."""
    from harness.p2p import spec as peer_spec
    from harness.running.presets import PRESETS

    plan = PRESETS.get(f"lab{n}") or peer_spec.PRESETS.get(f"lab{n}")
    return sorted(plan.seeds) if plan is not None else [0]


def command(n: int, root: Path, seeds: list[int] | None = None) -> str:
    """The page's main command with ``--out`` at the lab's folder, and ``--seeds`` where the
    folder holds other seeds than the preset runs."""
    page = grading.LABS[n][0]
    text = (root / PAGES / page).read_text()
    found = re.search(rf"^\.venv/bin/invoke run-sweep --preset lab{n}\b[^\n]*", text, re.M)
    base = found.group(0) if found else f".venv/bin/invoke run-sweep --preset lab{n}"
    more = (f" --seeds {','.join(map(str, seeds))}"
            if seeds and seeds != preset_seeds(n) else "")
    return f"{base}{more} --out {FOLDER.format(n=n)}"


def _value(values: pd.Series, fmt: str) -> str:
    v = values.dropna()
    if v.empty:
        return "-"
    if len(v) == 1 or v.min() == v.max():
        return format(v.iloc[0], fmt)
    return f"{format(v.median(), fmt)} [{format(v.min(), fmt)}, {format(v.max(), fmt)}]"


def cells(n: int, ok: pd.DataFrame) -> list[str]:
    """The table: a row per cell, each column's median over seeds [lowest, highest]."""
    cols = [c for c in COLUMNS.get(n, ()) if c[0] in ok]
    keys = [k for k in CELL if k in ok and ok[k].astype(str).nunique() > 1] or \
        [k for k in ("scheme", "method") if k in ok][:1]
    if not cols or not keys:
        return []
    lines = ["| " + " | ".join([*keys, *(c[1] for c in cols)]) + " |",
             "|" + "---|" * (len(keys) + len(cols))]
    for key, cell in ok.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        shown = [format(k, "g") if isinstance(k, float) else str(k) for k in key]
        lines.append("| " + " | ".join([*shown, *(_value(cell[c], f) for c, _, f in cols)])
                     + " |")
    return lines


def checks(sheet: grading.Sheet) -> list[str]:
    """What the checker says of each statement: how many of its checks hold, some in full."""
    lines = []
    items = dict.fromkeys(v.item for v in sheet.verdicts if not v.item.startswith("Q"))
    for item in sorted(items, key=lambda i: (i != "data", len(i), i)):
        mine = [v for v in sheet.verdicts if v.item == item]
        decided = [v for v in mine if v.ok is not None]
        right = sum(v.ok is True for v in decided)
        head = f"holds in {right} of {counted(len(decided), 'check')}" if decided else "not tested"
        texts = list(dict.fromkeys(v.text for v in mine if v.ok is False)) or \
            list(dict.fromkeys(v.text for v in mine))
        more = len(texts) - SHOWN
        lines.append(f"- **{item}** {head}: " + "; ".join(texts[:SHOWN])
                     + (f" (and {more} more)" if more > 0 else "") + ".")
    return lines


def figures(folder: Path, root: Path) -> str:
    """Links to the folder's figures, from a lab page."""
    pngs = sorted((folder / "figures").glob("*.png"))
    if not pngs:
        return ""
    links = ", ".join(f"[{p.stem}](../../{p.relative_to(root)})" for p in pngs)
    return f"Its figures: {links}."


def block(n: int, ctx: Context) -> str:
    """Lab ``n``'s expected results, from its committed folder."""
    rel = FOLDER.format(n=n)
    try:
        f = ctx.folder(rel)
    except MissingFolder:
        return (f"Not measured yet: `{rel}/` holds no runs. Fill it with `{command(n, ctx.root)}`"
                " and `.venv/bin/invoke publish`.")
    lines = [f"From {f.cite()}: {f.status().rstrip('.')}. Made by "
             f"`{command(n, ctx.root, f.seeds())}`. Each cell: the median over its runs and, in "
             "brackets, the lowest and the highest (a range over seeds, not an interval).", ""]
    table = cells(n, f.ok)
    lines += table + ([""] if table else [])
    try:
        sheet = grading.grade(n, f.path, tables_only=True)
    except UserError as err:
        lines.append(f"The checker could not read the folder: {err}")
    else:
        lines += [f"What `.venv/bin/invoke lab-check {n} --sweep {rel}` says of it, statement by "
                  "statement (a statement's numbers are the ones your own sweep should come "
                  "near):", ""] + checks(sheet)
    shown = figures(f.path, ctx.root)
    return "\n".join(lines + (["", shown] if shown else []))


def _blocks() -> dict:
    from harness.reporting.labs import graders  # noqa: F401  (registers every lab)

    return {f"lab{n}-expected": functools.partial(block, n) for n in sorted(grading.LABS)}


BLOCKS = _blocks()
FOLDERS = tuple(FOLDER.format(n=n) for n in sorted(grading.LABS))   # cited by the lab pages
