"""LTP against TCP on loopback: goodput and CPU per byte of one worker pushing to the PS over
127.0.0.1 (``invoke bench-transport --loopback-only``, :mod:`harness.bench.kind`), the block
``ltp-loopback`` of docs/ltp-protocol.md §6 and the findings section ``loopback``; and, from
the same folder's peer-to-peer transports (``peer-mcast``, ``peer-tcp``) and the p2p sweep's
tables, whether those Python transports could set the p2p round time (:func:`peer_share`).

Each run is one scheme's pushes of one size in one repetition; every scheme ran once per
repetition, in rotated order, so a scheme is compared with ``tcp-cubic`` repetition by repetition
(:func:`harness.reporting.stats.compare`, the repetition in the place of a seed). Issue 28 set two
targets at 4 MB: ``ltp``'s goodput at least TCP CUBIC's, its CPU per byte at most 1.5 times TCP's.
A target is judged by :func:`harness.reporting.stats.judge` on the paired ratio: met when the
ratio's interval lies on the target's side, missed when it lies on the other, undecided when it
holds the target.
"""

from __future__ import annotations

import pandas as pd

from harness.bench.names import FLOOR, MAC_PREFIX
from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.context import Context
from transports.peer import PEER_PREFIX

FOLDER = "results/loopback"
P2P = "results/p2p"
REFERENCE = "tcp-cubic"
TARGET_BYTES = 4 * 1024 * 1024
GOODPUT_TARGET = 1.0     # issue 28: ltp's goodput at least TCP's ...
CPU_TARGET = 1.5         # ... at most 1.5 times TCP's CPU per byte


def _by_repeat(runs: pd.DataFrame, column: str) -> pd.Series:
    """``runs[column]`` indexed by repetition (what :mod:`harness.reporting.stats` pairs on)."""
    return pd.Series(runs[column].to_numpy(dtype=float), index=runs["repeat"].to_numpy())


def ratio(runs: pd.DataFrame, scheme: str, size: int, column: str) -> stats.Estimate:
    """``scheme``'s ``column`` over :data:`REFERENCE`'s at ``size``, paired by repetition."""
    cell = runs[runs.bytes == size]
    return stats.paired(_by_repeat(cell[cell.transport == scheme], column),
                        _by_repeat(cell[cell.transport == REFERENCE], column))


def table(runs: pd.DataFrame) -> tuple[list[str], list[stats.Estimate]]:
    """A row per size and scheme: goodput, CPU per GB, and both over TCP's; the estimates shown."""
    lines = ["| bytes | scheme | runs | Gbit/s | CPU s/GB | goodput x `tcp-cubic` | "
             "CPU x `tcp-cubic` |", "|---|---|---|---|---|---|---|"]
    shown = []
    for size in sorted(runs.bytes.unique()):
        cell = runs[runs.bytes == size]
        for scheme in sorted(cell.transport.unique(), key=lambda s: (s == REFERENCE, s)):
            mine = cell[cell.transport == scheme]
            good, cpu = stats.median_ci(mine.goodput_gbps), stats.median_ci(mine.cpu_s_per_gb)
            ratios = ("-", "-")
            if scheme != REFERENCE and REFERENCE in set(cell.transport):
                g, c = (ratio(runs, scheme, size, col) for col in ("goodput_gbps", "cpu_s_per_gb"))
                ratios = (g.fmt(".2f", "x"), c.fmt(".2f", "x"))
                shown += [g, c]
            shown += [good, cpu]
            lines.append(f"| {size:,} | `{scheme}` | {len(mine)} | {good.fmt('.2f')} | "
                         f"{cpu.fmt('.3f')} | {ratios[0]} | {ratios[1]} |")
    return lines, shown


def targets(runs: pd.DataFrame) -> list[str]:
    """Issue 28's two targets for ``ltp`` at 4 MB, each judged on its paired ratio."""
    if not {"ltp", REFERENCE} <= set(runs[runs.bytes == TARGET_BYTES].transport):
        return [f"`ltp` and `{REFERENCE}` were not both measured at {TARGET_BYTES:,} bytes: the "
                "targets are not judged."]
    out = []
    for column, target, want, what in (
            ("goodput_gbps", GOODPUT_TARGET, 1, f"goodput at least {GOODPUT_TARGET:g}x TCP's"),
            ("cpu_s_per_gb", CPU_TARGET, -1, f"CPU per byte at most {CPU_TARGET:g}x TCP's")):
        est = ratio(runs, "ltp", TARGET_BYTES, column)
        sign = stats.judge(est, target)
        verdict = ("not judged (too few repetitions)" if sign is None else
                   "met" if sign == want else "missed" if sign == -want else
                   "undecided (the interval holds the target)")
        out.append(f"- `ltp` at {TARGET_BYTES:,} bytes, {what}: {est.fmt('.2f', 'x')} "
                   f"({est.label}, paired by repetition): **{verdict}**.")
    return out


def mac_cost(runs: pd.DataFrame) -> list[str]:
    """What the MAC alone leaves of issue 28's targets for an authenticated ``ltp`` at 4 MB: its
    CPU per byte (both ends' passes, :func:`harness.bench.loopback.mac_push`) against TCP's, and
    how much of the machine TCP keeps busy (its CPU per byte times its goodput, over the cores):
    where TCP keeps every core busy, a goodput at least TCP's needs a CPU per byte at most TCP's,
    MAC included."""
    at = runs[runs.bytes == TARGET_BYTES]
    macs = sorted(t for t in set(at.transport) if t.startswith(MAC_PREFIX))
    tcp = at[at.transport == REFERENCE]
    if not macs or tcp.empty:
        return []
    busy = stats.median_ci(tcp.cpu_s_per_gb * tcp.goodput_gbps / 8 / tcp.cpu_cores * 100)
    out = [f"The MAC alone at {TARGET_BYTES:,} bytes (a scheme `{MAC_PREFIX}<algorithm>` is no "
           "transport: its push is the core's MAC over the message twice, as the sender seals "
           "and the receiver checks every datagram, in loopback-sized datagrams, the key setup of "
           "each call left out, which the core does once per peer; its CPU is what `auth` adds "
           f"at the least). `{REFERENCE}` kept about {busy.fmt('.0f', ' %')} of the machine's "
           f"{int(tcp.cpu_cores.iloc[0])} cores busy (its CPU per byte times its goodput; "
           f"{busy.label}): where it keeps them all "
           "busy, a goodput at least TCP's needs a CPU per byte at most TCP's, MAC included.", ""]
    for mac in macs:
        est = ratio(runs, mac, TARGET_BYTES, "cpu_s_per_gb")
        left = [f"{cap - est.value:.2f}x {what}" if cap > est.value else f"nothing {what}"
                for cap, what in ((GOODPUT_TARGET, "under a CPU per byte equal to TCP's"),
                                  (CPU_TARGET, f"under the {CPU_TARGET:g}x target"))]
        out.append(f"- `{mac}`: {est.fmt('.2f', 'x')} `{REFERENCE}`'s whole CPU per byte "
                   f"({est.label}, paired by repetition), which leaves the rest of the path "
                   f"{left[0]} and {left[1]} (medians).")
    bare = "ltp+auth=false"
    if bare in set(at.transport):
        est = ratio(runs, bare, TARGET_BYTES, "cpu_s_per_gb")
        out.append(f"- `{bare}` (the rest of the path, no MAC): {est.fmt('.2f', 'x')} "
                   f"({est.label}).")
    return out + floor(runs)


def floor(runs: pd.DataFrame) -> list[str]:
    """The kernel's part of any UDP path at 4 MB (:data:`FLOOR`) against TCP's whole path, and
    with the MAC alone added: the least an authenticated transport over UDP pays per byte here,
    and what that allows of issue 28's targets where TCP keeps every core busy."""
    at = runs[runs.bytes == TARGET_BYTES]
    if FLOOR not in set(at.transport) or REFERENCE not in set(at.transport):
        return []
    cpu = ratio(runs, FLOOR, TARGET_BYTES, "cpu_s_per_gb")
    good = ratio(runs, FLOOR, TARGET_BYTES, "goodput_gbps")
    out = ["", f"The floor of a UDP path at {TARGET_BYTES:,} bytes (`{FLOOR}`: the message in "
           "65,507-byte datagrams through sendmmsg and recvmmsg, two threads of one process, no "
           "header, MAC, acknowledgement or recovery; the kernel's two copies of every byte and "
           f"its calls): {cpu.fmt('.2f', 'x')} `{REFERENCE}`'s CPU per byte and "
           f"{good.fmt('.2f', 'x')} its goodput ({cpu.label}, paired by repetition)."]
    mac = "mac-gmac128"
    if mac in set(at.transport):
        both = cpu.value + ratio(runs, mac, TARGET_BYTES, "cpu_s_per_gb").value
        out.append(f"With the default MAC's own CPU per byte (`{mac}`) added, an authenticated "
                   f"transport over UDP pays at least {both:.2f}x TCP's CPU per byte here "
                   "(the sum of the two medians, no interval); "
                   + ("above 1x, so where TCP keeps every core busy its goodput cannot reach "
                      "TCP's on this machine" if both > GOODPUT_TARGET else
                      "at most 1x, so the goodput target is not ruled out by this floor")
                   + (f", and above the {CPU_TARGET:g}x CPU target" if both > CPU_TARGET else
                      f", within the {CPU_TARGET:g}x CPU target") + ".")
    return out


def peer_share(runs: pd.DataFrame, p2p: pd.DataFrame) -> list[str]:
    """Whether the peer transports' own CPU could set the peer-to-peer round time: per p2p run,
    the CPU its transport needs for a round (half its access-link bytes, each byte sent by one
    peer and received by another, at the loopback CPU per GB of a send and its receipt, at the
    size nearest the run's message) over the round's time on every core of the machine."""
    peers = runs[runs.transport.str.startswith(PEER_PREFIX)]
    if peers.empty or p2p.empty:
        return []
    size = int(peers.bytes.min())
    at = runs[runs.bytes == size]
    native = stats.median_ci(at[at.transport == "ltp"].cpu_s_per_gb)
    peer_at = at[at.transport.str.startswith(PEER_PREFIX)]
    out = [f"Peer-to-peer transports on the same loopback, {size:,} bytes (a p2p round's message "
           "is the model's parameters): CPU s/GB "
           + ", ".join(f"`{t}` {stats.median_ci(g.cpu_s_per_gb).fmt('.2f')}"
                       for t, g in peer_at.groupby("transport"))
           + (f", against the native core's (`ltp`) {native.fmt('.3f')}." if native.n else "."),
           ""]
    for scheme, g in p2p.groupby(p2p.scheme.str.split("+").str[0]):
        mine = at[at.transport == PEER_PREFIX + scheme]
        if mine.empty:
            continue
        cpu = float(mine.cpu_s_per_gb.median())
        share = g.access_bytes_per_round / 2 / 1e9 * cpu / (g.round_s * g.cpu_cores)
        est = stats.median_ci(share * 100)
        out.append(f"- `{scheme}` in `{P2P}/` ({len(g)} runs): its own CPU would take "
                   f"{est.fmt('.1f', ' %')} of the machine's time in a round (median over the "
                   f"runs; the highest run {100 * share.max():.1f} %), from each run's access-link "
                   f"bytes and round time and the loopback CPU per GB above (its median, which "
                   "carries no interval into this estimate).")
    out += ["", "An estimate, not a measurement on the fabric: the peers there also train on the "
            "same cores. A share far below 100 % means the transport's CPU fits in a round many "
            "times over, so the fabric, not the Python transport, sets the round time."]
    return out


def body(ctx: Context) -> list[str]:
    """The table, the legend, the targets and the peer transports' share of a p2p round."""
    runs = ctx.folder(FOLDER).ok
    lines, shown = table(runs)
    return [f"One worker pushes to the PS over 127.0.0.1 in one process, "
            f"{int(runs.pushes.max())} pushes a run; a run's goodput is the message over its "
            "median push, its CPU the process's (both ends, user + system) per 10^9 bytes pushed; "
            "every scheme ran once per repetition, in rotated order, and the ratios are to "
            f"`{REFERENCE}`'s in the same repetition:", "", *lines, "",
            stats.intervals_legend(shown)
            + " Here a run is a repetition, and the machine's load moves both figures from "
            "minute to minute.", "", "Issue 28's targets (a target is met when the paired "
            "ratio's interval lies on its side, missed when it lies on the other):", "",
            *targets(runs), "", *mac_cost(runs), "", *peer_share(runs, ctx.folder(P2P).ok)]


def block(ctx: Context) -> str:
    """docs/ltp-protocol.md §6: the loopback benchmark's committed folder."""
    cites = []
    for f in (ctx.folder(FOLDER), ctx.folder(P2P)):
        cites += [f"- {f.cite()}: {f.status()}", *(f"  - `{cmd}`" for cmd in f.commands())]
    return "\n".join([*cites, "", *body(ctx)])


BLOCKS = {"ltp-loopback": block}
SECTIONS = [Section("loopback", "Is LTP as fast as TCP on loopback, at no more CPU per byte?",
                    (FOLDER, P2P), body)]
