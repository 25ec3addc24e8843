"""Findings on the LTP protocol itself, and the generated blocks of docs/ltp-protocol.md.

``results/ablations/cwnd-ack-extra/`` widens the window's allowance for late ACKs
(``cwnd_ack_extra_us``, protocol page §5) and so asks where the rest of LTP's iteration goes: the
block ``ltp-ack-extra`` and the findings section ``ack-extra``. ``results/regimes/edge-25ms/``
runs ``ltp`` and ``ltp-reliable`` at 25 ms one way, the regime of issue 10 (§12): the block
``ltp-edge``.

Every number is computed from the folders' tables, every verdict comes from
:func:`harness.reporting.stats.compare` and every phrase that states one is picked by its sign.
"""

from __future__ import annotations

import json

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import dataset, span
from harness.reporting.publish.context import Context, Folder
from harness.reporting.report import seed_text

ACK_EXTRA = "results/ablations/cwnd-ack-extra"
EDGE = "results/regimes/edge-25ms"
OPTION = "cwnd_ack_extra_us"
TOLERANT, RELIABLE = "ltp", "ltp-reliable"
# A full LTP datagram on the emulated Ethernet as the bottleneck carries it: the 1,500-byte
# MTU plus the 14-byte Ethernet header (a protocol constant, §1 and §6 of the protocol page).
FRAME_BYTES = 1514

# Verdict phrases by sign (+1 the first side better, -1 the second, 0 within noise, None none).
FASTER = {1: "faster", -1: "slower", 0: "within noise", None: "not compared"}
SHORTER = {1: "shorter", -1: "longer", 0: "within noise", None: "not compared"}
FEWER = {1: "fewer", -1: "more", 0: "within noise", None: "not compared"}
HIGHER = {1: "higher", -1: "lower", 0: "within noise", None: "not compared"}


def _options(row: pd.Series) -> dict:
    """The effective transport options of one run."""
    return json.loads(row.transport_options)


def _list(values) -> str:
    """``0, 2, 10``: sorted distinct numbers without trailing zeros."""
    return ", ".join(f"{v:g}" for v in sorted(set(values)))


def _setting(f: Folder) -> str:
    """What every run of the folder shared, from its table and manifest."""
    runs = f.ok
    base = f.manifest.get("plan", {}).get("base", {})
    delays = sorted(runs.delay_ms.unique())
    delay = ("" if delays == [0] else
             f", {_list(delays)} ms added one way at every host's ingress (round trip measured "
             f"before each run: {span(runs.rtt_ms, '.1f')} ms)")
    models = sorted({str(m).split(":")[0] for m in runs.loss_model})
    cap = base.get("max_train_s")
    auth = {bool(_options(r).get("auth")) for _, r in runs.iterrows()}
    auth_text = (", `auth` on" if auth == {True} else ", `auth` off" if auth == {False} else "")
    return (f"{int(runs.n_workers.median())} workers and a PS training the "
            f"{str(runs.model.iloc[0]).upper()} on {dataset(runs.dataset.iloc[0])} through a "
            f"{_list(runs.bottleneck_mbps)} Mbit/s bottleneck with a "
            f"{int(runs.queue_pkts.median())}-packet queue{delay}, {'/'.join(models)} loss of "
            f"{_list(runs.loss_pct)} % per packet and direction{auth_text}, seeds "
            f"{seed_text(f.seeds())}, each run {int(runs.iterations.max())} iterations"
            + (f" or {cap:g} s of training" if cap else ""))


def _cell(f: Folder, scheme: str, loss: float) -> pd.DataFrame:
    return f.ok[(f.ok.scheme == scheme) & (f.ok.loss_pct == loss)]


def _head(f: Folder) -> str:
    """Where a block's numbers come from and whether they are stale."""
    return f"Numbers from {f.cite()}: {f.status()}"


# --- the window's allowance for late ACKs: where the rest of the iteration goes --------------

def _allowance(f: Folder) -> dict[str, float]:
    """Each scheme of the ablation and its ``cwnd_ack_extra_us`` in ms, the default first."""
    out = {}
    for scheme, group in f.ok.groupby("scheme"):
        out[scheme] = _options(group.iloc[0]).get(OPTION, float("nan")) / 1000
    default = [s for s in out if "+" not in s]
    return {s: out[s] for s in default + sorted((s for s in out if "+" in s), key=out.get)}


def _ack_extra_frame(f: Folder) -> pd.DataFrame:
    """The ablation's runs with the time after the broadcast (iteration p50 minus broadcast
    p50, per run) and the broadcast's own bound (every worker's parameters at the bottleneck
    rate: the full-duplex bound less one push)."""
    d = f.ok.copy()
    d["after_s"] = d.iter_p50_s - d.broadcast_p50_s
    d["bcast_bound_s"] = d.fd_bound_s - d.push_bound_s / d.n_workers
    return d


def _ack_extra_lines(f: Folder) -> list[str]:
    """The table, the verdicts against the default allowance and what they add up to."""
    d = _ack_extra_frame(f)
    allow = _allowance(f)
    default = next(iter(allow))
    wider = [s for s in allow if s != default]
    losses = sorted(d.loss_pct.unique())
    name = {s: f"{allow[s]:g} ms" + (" (default)" if s == default else "") for s in allow}
    cols = (("broadcast_p50_s", False, SHORTER, "broadcast", ".3f"),
            ("after_s", False, SHORTER, "the time after it", ".3f"),
            ("queue_drops", False, FEWER, "PS port drops", ".0f"),
            ("iters_per_s", True, FASTER, "iterations/s", ".2f"))
    rows, found, shown = [], {}, []
    for loss in losses:
        base = d[(d.loss_pct == loss) & (d.scheme == default)]
        for s in allow:
            mine = d[(d.loss_pct == loss) & (d.scheme == s)]
            ests = [stats.median_ci(mine[c]) for c, *_ in cols]
            shown += ests
            against = "-"
            if s != default:
                for c, hib, _, _, spec in cols:
                    found[(loss, s, c)] = stats.compare(
                        name[s], stats.by_seed(mine, c), name[default], stats.by_seed(base, c),
                        higher_is_better=hib, spec=spec)
                v = found[(loss, s, "iters_per_s")]
                against = f"{FASTER[v.sign]}, {v.estimate.fmt('.2f', 'x')}"
            rows.append(f"| {loss:g} | {name[s]} | " + " | ".join(
                e.fmt(spec) for e, (*_, spec) in zip(ests, cols)) + f" | {against} |")
    bound = stats.median_ci(d.bcast_bound_s).value
    lines = [f"Per setting and loss rate: the PS's serial broadcast (median over a run's "
             f"iterations; {int(d.n_workers.median())} parameter messages need {bound:.3f} s at "
             "the link's rate), the time after it (the run's median iteration less its median "
             "broadcast: the last "
             "worker's compute and push, the update), the packets the bottleneck queue in front "
             "of the PS dropped in the run (`queue_drops`), and iterations/s, the last against "
             f"the default allowance's with the same seed ({stats.RULE}):", "",
             "| loss % | allowance | broadcast p50 s | after it s | PS port drops | "
             f"iterations/s | against {name[default].split(' (')[0]} |",
             "|---|---|---|---|---|---|---|", *rows, "", stats.intervals_legend(shown), ""]
    for loss in losses:
        parts = []
        for s in wider:
            said = [f"{what} {words[found[(loss, s, c)].sign]} "
                    f"({found[(loss, s, c)].estimate.fmt('.2f', 'x')})"
                    for c, _, words, what, _ in cols]
            parts.append(f"{name[s]}: " + ", ".join(said))
        lines.append(f"- {loss:g} % loss, against {name[default]}: " + "; ".join(parts) + ".")
    lines += ["", _ack_extra_reading(found, losses, wider, name, default)]
    return lines


def _ack_extra_reading(found: dict, losses: list, wider: list, name: dict, default: str) -> str:
    """What the verdicts add up to, in phrases picked by their signs."""
    def cells(col: str, sign: int) -> list[str]:
        return [f"{name[s]} at {x:g} %" for x in losses for s in wider
                if found[(x, s, col)].sign == sign]

    shorter = cells("broadcast_p50_s", 1)
    queued = [c for c in shorter if c in cells("after_s", -1) and c in cells("queue_drops", -1)]
    faster, slower = cells("iters_per_s", 1), cells("iters_per_s", -1)
    out = []
    if shorter:
        out.append(f"A wider allowance shortened the broadcast in {len(shorter)} of "
                   f"{len(losses) * len(wider)} cells ({', '.join(shorter)}).")
    else:
        out.append("No wider allowance shortened the broadcast beyond noise.")
    if queued:
        where = ("In each of them" if queued == shorter else f"Where it did ({', '.join(queued)})")
        out.append(f"{where}, the time after the broadcast grew and "
                   "the PS's port dropped more: the gradients still need the uplink toward the "
                   "PS for every worker's message once the first worker has computed, so a "
                   "faster broadcast only makes them queue there sooner.")
    if faster:
        out.append(f"Iterations/s were faster than with the default in {', '.join(faster)}: "
                   f"the default of {name[default].split(' (')[0]} is worth revisiting.")
    else:
        out.append("No wider allowance gave more iterations/s than the default"
                   + (f" (slower in {', '.join(slower)})" if slower else "")
                   + f", so the default stays {name[default].split(' (')[0]}.")
    return " ".join(out)


def ack_extra_block(ctx: Context) -> str:
    """docs/ltp-protocol.md §5: what wider allowances for late ACKs did to the broadcast and the
    iteration."""
    f = ctx.folder(ACK_EXTRA)
    with stats.tally() as tally:
        body = _ack_extra_lines(f)
    return "\n".join([_head(f), "", f"What ran: `ltp` with `{OPTION}` at "
                      f"{', '.join(f'{v:g}' for v in _allowance(f).values())} ms, "
                      f"{_setting(f)}.", "", *body, "", tally.sentence("passage")])


def _ack_extra_body(ctx: Context) -> list[str]:
    f = ctx.folder(ACK_EXTRA)
    return ["Beyond its floor, LTP's iteration spends its time either in the PS's serial "
            "broadcast or in what follows it (each sweep's report splits the two: \"The "
            "iteration against its bounds\"). The PS's window allows "
            f"`{OPTION}` beyond the bandwidth-delay product for ACKs that come back late "
            "(protocol page §5), and during an iteration the parameters' ACKs queue behind the "
            "gradients toward the PS, so the broadcast can be window-bound below the link's "
            "rate. Does a wider allowance shorten the broadcast, and does the iteration follow? "
            f"`ltp` with `{OPTION}` at "
            f"{', '.join(f'{v:g}' for v in _allowance(f).values())} ms, {_setting(f)}.", "",
            *_ack_extra_lines(f)]


# --- LTP at 25 ms one way (issue 10) ---------------------------------------------------------

def _per_iter(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame[column] / frame.iterations_done


def _edge_table(f: Folder) -> list[str]:
    d = f.ok.assign(retx_per_it=lambda x: _per_iter(x, "retransmits"),
                    drops_per_it=lambda x: (x.random_drops + x.queue_drops) / x.iterations_done,
                    retx_over_drops=lambda x: x.retransmits / (x.random_drops + x.queue_drops))
    shown = []
    rows = []
    for loss in sorted(d.loss_pct.unique()):
        for s in (TOLERANT, RELIABLE):
            c = d[(d.loss_pct == loss) & (d.scheme == s)]
            if c.empty:
                continue
            ests = [(stats.median_ci(c[col]), spec) for col, spec in (
                ("iters_per_s", ".2f"), ("iter_p50_s", ".3f"), ("iter_p99_s", ".3f"),
                ("retx_per_it", ".0f"), ("drops_per_it", ".0f"), ("retx_over_drops", ".2f"),
                ("final_accuracy", ".3f"))]
            shown += [e for e, _ in ests]
            cells = [e.fmt(spec) for e, spec in ests]
            rows.append(f"| {loss:g} | `{s}` | " + " | ".join(cells[:6])
                        + f" | {int(c.early_closes.sum())} of {int(c.gradient_msgs.sum())} | "
                          f"{c.min_recv_frac.min():.3f} | {cells[6]} |")
    return ["| loss % | scheme | iterations/s | iteration p50 s | iteration p99 s | "
            "retransmits / it | drops / it | retransmits / drops | gradients closed early | "
            "smallest fraction of a gradient | final accuracy |",
            "|---|---|---|---|---|---|---|---|---|---|---|", *rows, "",
            stats.intervals_legend(shown), ""]


def _edge_repair(f: Folder) -> str:
    d = f.ok
    ratio = d.retransmits / (d.random_drops + d.queue_drops)
    qd = d.queue_drops
    below = bool((ratio < 1).all())
    head = ("Retransmissions stay below the drops." if below else
            "Some runs retransmitted more than was dropped.")
    return (f"- **{head}** The bottleneck queue dropped {int(qd.min()):,}-{int(qd.max()):,} "
            "packets a run (the incast's own); retransmissions were "
            f"{span(ratio)} of all drops per run, "
            + ("below 1 in every run, as they should be: drops also count what needs no repair "
               "(the workers' ACKs, a copy lost after its message closed) and `ltp`'s early "
               "closes skip a few." if below else
               "above 1 in some run: more retransmissions than drops means some were "
               "spurious (the hosts' `duplicates` counters, in the run folders, say how many)."))


def _edge_closes(f: Folder) -> str:
    out, short = [], False
    for loss in sorted(f.ok.loss_pct.unique()):
        c = _cell(f, TOLERANT, loss)
        if c.empty:
            continue
        n, total, least = int(c.early_closes.sum()), int(c.gradient_msgs.sum()), \
            float(c.min_recv_frac.min())
        if loss == 0:
            tmax = max(_options(r).get("threshold_max", 1.0) for _, r in c.iterrows())
            out.append(f"at 0 % loss {n} of {total} closed early, the smallest delivering "
                       f"{least:.3f}" + (f", at `threshold_max` ({tmax:g}): with no random loss "
                                         "the threshold is `threshold_max`, and the queue's "
                                         "drops sent some gradients into the grace period"
                                         if n and least >= tmax - 1e-3 else ""))
            continue
        floor = 1 - loss / 100
        short = short or least < floor
        out.append(f"at {loss:g} % loss {n} of {total}, the smallest delivering {least:.3f}, "
                   + ("at or above" if least >= floor else "**below**")
                   + f" 1 - loss = {floor:g}")
    maxwait = int(f.ok.max_wait_closes.sum())
    head = ("Some early closes delivered less than `1 - loss`." if short else
            "Early closes deliver at least `1 - loss`.")
    return (f"- **{head}** Gradients of `ltp` closed early: "
            + "; ".join(out) + ". "
            + ("No message closed by max-wait." if not maxwait else
               f"{maxwait} messages closed by max-wait."))


def _edge_versus(f: Folder) -> list[str]:
    """``ltp`` against ``ltp-reliable`` at every loss rate: iterations/s, median and p99
    iteration, final accuracy; then what the largest loss rate's verdicts say."""
    cols = (("iters_per_s", True, FASTER, "iterations/s", ".2f", "ratio"),
            ("iter_p50_s", False, SHORTER, "median iteration", ".3f", "ratio"),
            ("iter_p99_s", False, SHORTER, "p99 iteration", ".3f", "ratio"),
            ("final_accuracy", True, HIGHER, "final accuracy", ".4f", "diff"))
    lines, found = [], {}
    losses = sorted(f.ok.loss_pct.unique())
    for loss in losses:
        a, b = _cell(f, TOLERANT, loss), _cell(f, RELIABLE, loss)
        said = []
        for col, hib, words, what, spec, op in cols:
            v = stats.compare(TOLERANT, stats.by_seed(a, col), RELIABLE, stats.by_seed(b, col),
                              higher_is_better=hib, spec=spec, op=op)
            found[(loss, col)] = v
            shown = (v.estimate.fmt(".2f", "x") if op == "ratio"
                     else v.estimate.fmt("+" + spec))
            said.append(f"{what} {words[v.sign]} ({shown})")
        lines.append(f"  - {loss:g} % loss: " + ", ".join(said) + ".")
    top = losses[-1]
    its, p50, p99 = (found[(top, c)].sign for c in ("iters_per_s", "iter_p50_s", "iter_p99_s"))
    tail = ""
    if its == 1 and p99 == 1:
        tail = (f"At {top:g} % `ltp`'s slowest iterations are shorter: it closes a gradient "
                "instead of waiting for a tail retransmission"
                + (", while its median iteration is within noise of `ltp-reliable`'s, so the "
                   "gain is in the tail." if p50 == 0 else "."))
        a, b = _cell(f, TOLERANT, top), _cell(f, RELIABLE, top)
        skipped = stats.median_ci(_per_iter(a, "retx_avoided")).value
        retx = stats.median_ci(_per_iter(a, "retransmits")).value
        link_s = skipped * FRAME_BYTES * 8 / (float(a.bottleneck_mbps.median()) * 1e6)
        saved = 1 / stats.median_ci(b.iters_per_s).value - 1 / stats.median_ci(a.iters_per_s).value
        tail += (f" Early closes skipped {skipped:.1f} packets an iteration (median over runs), "
                 f"of {retx:.0f} retransmitted: {1000 * link_s:.1f} ms of link time, against "
                 f"{saved:.3f} s that `ltp` saves per iteration (the difference of the medians' "
                 "reciprocals), so "
                 + ("the gain is not in retransmissions avoided." if link_s < saved else
                    "retransmissions avoided could account for the gain."))
    head = "- **`ltp` against `ltp-reliable`** (per-seed ratios; accuracy as a difference):"
    return [head, *lines] + ([f"  {tail}"] if tail else [])


def _edge_end(f: Folder) -> str:
    runs, ok = f.runs, f.ok
    target = int(ok.iterations.max())
    full = ok[ok.iterations_done >= target]
    short = ok[ok.iterations_done < target]
    cap = f.manifest.get("plan", {}).get("base", {}).get("max_train_s")
    why = [f"`{r.scheme}` at {r.loss_pct:g} % loss, seed {int(r.seed)}, after "
           f"{int(r.iterations_done)} iterations (`stopped_by` {r.stopped_by}"
           + (f": the sweep's {cap:g} s cap on training time, not a stall" if
              r.stopped_by == "time_cap" and cap else "") + ")"
           for r in short.itertuples()]
    zero = _cell(f, TOLERANT, 0)
    hang = len(ok) < len(runs) or any(r.stopped_by != "time_cap" for r in short.itertuples())
    text = (f"- **{'Not every run finished.' if hang else 'No hang.'}** {len(ok)} of "
            f"{len(runs)} runs ended with status ok; {len(full)} ran "
            f"their {target} iterations"
            + (f", and {len(why)} stopped earlier: " + "; ".join(why) if why else "") + ".")
    if not zero.empty:
        bcast = stats.median_ci(zero.broadcast_p50_s)
        bound = float((zero.fd_bound_s - zero.push_bound_s / zero.n_workers).median())
        text += (f" The median broadcast of `ltp` at 0 % loss took {bcast.fmt('.3f', ' s')}, "
                 f"against {bound:.3f} s that {int(zero.n_workers.median())} parameter messages "
                 f"need at the link's rate (payload alone) plus one round trip of "
                 f"{float(zero.rtt_ms.median()):.0f} ms.")
    return text


def edge_block(ctx: Context) -> str:
    """docs/ltp-protocol.md §12: `ltp` and `ltp-reliable` at 25 ms one way on the testbed."""
    f = ctx.folder(EDGE)
    with stats.tally() as tally:
        body = [*_edge_table(f), _edge_repair(f), _edge_closes(f), *_edge_versus(f),
                _edge_end(f)]
    commands = "; ".join(f"`{c}`" for c in f.commands())
    return "\n".join([_head(f), "", f"What ran ({commands}): {_setting(f)}.", "",
                      "*Drops* are the packets the loss model and the bottleneck queue dropped, "
                      "ACKs and CLOSEs included; *gradients closed early* and the smallest "
                      "fraction any gradient delivered are summed and taken over the cell's "
                      "runs.", "",
                      *body, "", tally.sentence("passage")])


BLOCKS = {"ltp-ack-extra": ack_extra_block, "ltp-edge": edge_block}
SECTIONS = [
    Section("ack-extra", "Where does the rest of LTP's iteration go?", (ACK_EXTRA,),
            _ack_extra_body),
]
