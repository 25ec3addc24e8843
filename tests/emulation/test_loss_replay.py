"""Replayable loss on the real testbed: two runs of different schemes with one seed meet the same
losses packet position by packet position on every host's ingress; the kernel drops what the
helper's simulation of the same seed drops; another seed drops elsewhere; and a recorded trace,
replayed under a third scheme, drops the recorded positions again."""

import subprocess

import numpy as np

from tests.emulation.conftest import incast_fixture, short_run
from topologies.impair import loss as impair
from topologies.impair.trace import read_trace, same_positions

ITERATIONS = 4
bed = incast_fixture("replay", 2)


def traces(row_dir):
    """Each host's recorded trace of a run, by host."""
    return {f.stem: read_trace(f) for f in sorted((row_dir / "loss").glob("*.trace"))}


def test_one_seed_one_loss_pattern_across_schemes_and_a_trace_replays_it(bed, tmp_path):
    runs = {}
    for name, transport, loss, seed in [("tcp", "tcp-cubic", "replay:5", 7),
                                        ("ltp", "ltp", "replay:5", 7),
                                        ("other", "ltp", "replay:5", 8)]:
        row, _, _ = short_run(bed, tmp_path, ITERATIONS, transport=transport, loss_model=loss,
                              seed=seed)
        runs[name] = traces(tmp_path / row["run_id"])
    tcp, ltp, other = runs["tcp"], runs["ltp"], runs["other"]
    hosts = bed[0].host_names()
    assert sorted(tcp) == sorted(ltp) == sorted(hosts)
    for host in hosts:
        a, b = tcp[host], ltp[host]
        common = min(a.packets, b.packets)
        assert np.count_nonzero(a.dropped < common) > 10, f"{host}: too few drops to compare"
        assert same_positions(a, b), f"{host}: one seed, other positions dropped"
        assert not same_positions(a, other[host]), f"{host}: seed 8 dropped as seed 7 did"

    # The kernel's decisions are the helper's simulation of the same seed and host (stream).
    ps_stream = hosts.index("ps1")
    sim = tmp_path / "sim.trace"
    flags = [x for k, v in impair.ReplayUniform(5).flags().items() for x in (f"--{k}", repr(v))]
    subprocess.run([str(impair.ge_binary()), "simulate", "--packets", str(tcp["ps1"].packets),
                    "--seed", "7", "--stream", str(ps_stream), *flags, "--out", str(sim)],
                   check=True, capture_output=True)
    assert np.array_equal(read_trace(sim).dropped, tcp["ps1"].dropped)

    # The tcp run's traces replayed under ltp-reliable: the same positions again.
    recorded = next(p for p in tmp_path.iterdir() if p.name.startswith("tcp-cubic"))
    row, _, _ = short_run(bed, tmp_path, ITERATIONS, transport="ltp-reliable",
                          loss_model=f"trace:{recorded / 'loss'}", seed=1)
    replayed = traces(tmp_path / row["run_id"])
    for host in hosts:
        assert same_positions(tcp[host], replayed[host]), f"{host}: the replay dropped elsewhere"
        past = replayed[host].dropped >= tcp[host].packets
        assert not past.any(), f"{host}: dropped past the trace's end"
