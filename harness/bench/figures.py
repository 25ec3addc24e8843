"""The figure of a loopback folder (:mod:`harness.bench.kind`), from its tables.

``draw(folder)`` writes ``folder/figures/loopback.png``: goodput (Gbit/s) and CPU seconds per GB
per scheme, one panel each, message sizes side by side; a dot is the median over the folder's
repetitions and its bar the order-statistic interval of that median
(:func:`harness.reporting.stats.median_ci`, the coverage it has with that many repetitions).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harness.reporting import stats  # noqa: E402
from harness.reporting.report import counted  # noqa: E402
from harness.reporting.tables import look  # noqa: E402
from harness.running.results import read_table  # noqa: E402

PANELS = (("goodput_gbps", "goodput (Gbit/s)"), ("cpu_s_per_gb", "CPU s per GB (both ends)"))


def draw(folder: Path) -> list[Path]:
    """The folder's figure (none without an ok run); its path."""
    runs = read_table(folder / "runs.csv")
    ok = runs[runs.status == "ok"]
    if ok.empty:
        return []
    out = folder / "figures"
    out.mkdir(exist_ok=True)
    sizes = sorted(ok.bytes.unique())
    schemes = sorted(ok.transport.unique())
    palette, markers, names = look(schemes)   # a variant (ltp+auth=false) gets its own colour
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    width = 0.8 / max(1, len(schemes))
    for ax, (column, label) in zip(axes, PANELS):
        for i, scheme in enumerate(schemes):
            xs, meds, errs = [], [], [[], []]
            for j, size in enumerate(sizes):
                est = stats.median_ci(ok[(ok.transport == scheme) & (ok.bytes == size)][column])
                if est.n == 0:
                    continue
                xs.append(j - 0.4 + width * (i + 0.5))
                meds.append(est.value)
                errs[0].append(est.value - est.lo)
                errs[1].append(est.hi - est.value)
            ax.errorbar(xs, meds, yerr=errs, fmt=markers[scheme], color=palette[scheme],
                        capsize=3, label=names[scheme])
        ax.set_xticks(range(len(sizes)), [f"{s / 2**20:.2f} MiB" if s >= 2**20 else
                                          f"{s / 1e3:.0f} kB" for s in sizes])
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    n = int(ok.groupby(["transport", "bytes"]).size().min())
    fig.suptitle("one worker to the PS over 127.0.0.1; the median over the repetitions and its "
                 f"interval ({counted(n, 'repetition')} or more a point)", fontsize=9)
    fig.tight_layout()
    path = out / "loopback.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
