"""The head-to-head's report section and figure on synthetic tables: cells, the winner rule (a
winner only when faster than every other scheme beyond noise, paired by seed), and a figure."""

import types

import matplotlib
import numpy as np
import pandas as pd

from harness.reporting.sections import field

matplotlib.use("Agg")


def table(times: dict[str, float], cells=(("uniform:0", 0.0, 0.0, 64), ("replay:5", 5.0, 0.0, 64),
                                          ("replay:2", 2.0, 10.0, 64)), seeds=6, spread=0.5):
    rng = np.random.default_rng(3)
    rows = []
    for loss_model, loss_pct, delay, queue in cells:
        for scheme, base in times.items():
            for seed in range(seeds):
                t = base + rng.normal(0, spread)
                rows.append(dict(scheme=scheme, seed=seed, loss_model=loss_model,
                                 loss_pct=loss_pct, delay_ms=delay, queue_pkts=queue, n_workers=8,
                                 bottleneck_mbps=200.0, time_to_target_s=t, target_reached=True,
                                 target_accuracy=0.8, final_accuracy=0.82, iter_p99_s=0.3,
                                 mean_recv_frac=0.99))
    return pd.DataFrame(rows)


def sweep(ok):
    return types.SimpleNamespace(ok=ok, names={})


def test_cells_name_the_loss_and_where_the_regime_differs():
    d = field.frame(sweep(table({"ltp": 10, "mlt": 12})))
    assert field.cells(d) == ["no loss", "replay:2, +10 ms one way", "replay:5"]


def test_a_winner_only_when_faster_than_every_other_beyond_noise():
    ok = field.frame(sweep(table({"ltp": 10, "mlt": 14, "phase-bound": 20})))
    fastest, best, verdicts = field.winner(ok[ok.cell == "replay:5"])
    assert fastest == best == "ltp" and len(verdicts) == 2
    close = field.frame(sweep(table({"ltp": 10, "mlt": 10.05, "phase-bound": 20}, spread=1)))
    fastest, best, verdicts = field.winner(close[close.cell == "replay:5"])
    assert fastest in ("ltp", "mlt") and best is None


def test_a_scheme_that_misses_the_target_is_infinitely_late():
    ok = table({"ltp": 10, "optireduce": 12})
    ok.loc[ok.scheme == "ltp", "target_reached"] = False
    d = field.frame(sweep(ok))
    fastest, best, _ = field.winner(d[d.cell == "no loss"])
    assert fastest == best == "optireduce"


def test_the_section_and_the_figure(tmp_path):
    sw = sweep(table({"ltp": 10, "mlt": 14, "tcp-cubic-lowrto": 30}))
    text = "\n".join(field.section(sw))
    assert "## The field head to head" in text and "`ltp` wins" in text
    assert "comparisons" in text

    def save(fig, folder, name):
        path = folder / f"{name}.png"
        fig.savefig(path)
        return [path]
    assert [p.name for p in field.draw(sw, tmp_path, save)] == ["field_ranking.png"]
    assert not field.applies(sweep(table({"ltp": 10, "plot": 11})))   # no design of the field


def test_a_design_is_a_scheme_under_its_pattern():
    ok = table({"ltp": 10, "optireduce": 12})
    ok["pattern"] = ["ring" if s == "optireduce" or i % 2 else "ps"
                     for i, s in enumerate(ok.scheme)]
    d = field.frame(sweep(ok))
    assert set(d.design) == {"ltp", "ltp (ring)", "optireduce (ring)"}
    assert field.order(d)[:1] == ["ltp"]


def test_below_three_seeds_a_cell_is_not_compared():
    # Two seeds a design: no comparison is stated, so no winner and no "none separates" either.
    d = field.frame(sweep(table({"ltp": 10, "mlt": 30}, seeds=2)))
    fastest, best, verdicts = field.winner(d[d.cell == "replay:5"])
    assert best is None and all(v.sign is None for v in verdicts)
    assert field.verdict_text(fastest, best, verdicts) == \
        "not compared (fewer than 3 runs a design)"
    d = field.frame(sweep(table({"ltp": 10, "mlt": 30})))
    assert field.verdict_text(*field.winner(d[d.cell == "replay:5"])) == \
        "`ltp` wins (faster than each of the 1 others)"
