"""Replayable loss without root: ``replay:`` and ``trace:`` as texts, the helper's command lines,
trace files, and the chain's drops by packet position (the helper's ``simulate`` runs the code
the kernel runs, and writes the trace the kernel records for the same packets)."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from topologies.impair import loss as impair
from topologies.impair.ingress import Ingress
from topologies.impair.loss import Impairment, LossModelError, ReplayUniform, Trace, parse_loss
from topologies.impair.trace import TraceError, read_trace, same_positions


def simulate(helper, packets: int, model_flags: list[str], seed=3, stream=0, out=None) -> dict:
    argv = [str(helper), "simulate", "--packets", str(packets), "--seed", str(seed),
            "--stream", str(stream), *model_flags]
    if out is not None:
        argv += ["--out", str(out)]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


def flags_of(model) -> list[str]:
    return [x for name, value in model.flags().items() for x in (f"--{name}", repr(value))]


# ---- texts ---------------------------------------------------------------------------------

def test_replay_parses_and_keeps_its_rate():
    model = parse_loss(" replay:2.5 ")
    assert model == ReplayUniform(2.5) and model.text() == "replay:2.5"
    assert model.mean_loss_pct == 2.5
    assert Impairment("replay:5", seed=4).loss == ReplayUniform(5.0)


@pytest.mark.parametrize("text, words", [
    ("replay:", "number"), ("replay:x", "number"), ("replay:50", "below 50"),
    ("replay:-1", "at least 0"), ("trace:", "not a folder"),
    ("trace:/no/such/folder", "not a folder"),
])
def test_bad_texts_raise_one_sentence(text, words):
    with pytest.raises(LossModelError) as info:
        parse_loss(text)
    message = str(info.value)
    assert words in message and message.endswith(".") and message.count(". ") == 0, message


def test_a_folder_without_traces_is_refused(tmp_path):
    with pytest.raises(LossModelError, match="holds no loss traces"):
        parse_loss(f"trace:{tmp_path}")


def test_the_run_id_names_the_kind():
    from harness.running.spec import RunSpec
    spec = RunSpec(loss_model="replay:5", seed=2)
    assert "_lossreplay5_" in spec.run_id and spec.loss_pct == 5.0
    assert spec.loss_text == "replay:5"


# ---- command lines -------------------------------------------------------------------------

def test_replay_attaches_the_chain_held_good(helper):
    argv = impair.ge_argv("attach", "ps1-eth0", ReplayUniform(5), seed=3, stream=1)
    flags = dict(zip(argv[4::2], argv[5::2]))
    assert flags == {"--p-gb": "0.0", "--p-bg": "0.0", "--loss-good": "0.05",
                     "--loss-bad": "1.0", "--seed": "3", "--stream": "1"}


def test_trace_and_dump_command_lines(helper, tmp_path):
    f = tmp_path / "ps1.trace"
    assert impair.ge_argv("attach", "ps1-eth0", f)[2:] == ["--dev", "ps1-eth0", "--trace", str(f)]
    assert impair.ge_argv("dump", "ps1-eth0", f)[1:] == ["dump", "--dev", "ps1-eth0", "--out",
                                                          str(f)]


# ---- drops by position ---------------------------------------------------------------------

def test_one_seed_drops_the_same_positions_and_another_does_not(helper, tmp_path):
    model = flags_of(ReplayUniform(5))
    simulate(helper, 50_000, model, seed=3, stream=1, out=tmp_path / "a.trace")
    simulate(helper, 30_000, model, seed=3, stream=1, out=tmp_path / "b.trace")
    simulate(helper, 50_000, model, seed=4, stream=1, out=tmp_path / "c.trace")
    simulate(helper, 50_000, model, seed=3, stream=2, out=tmp_path / "d.trace")
    a, b, c, d = (read_trace(tmp_path / f"{x}.trace") for x in "abcd")
    assert (a.packets, b.packets) == (50_000, 30_000)
    assert same_positions(a, b)        # a shorter run met the same drops as far as it went
    assert not same_positions(a, c)    # another seed
    assert not same_positions(a, d)    # another host
    assert a.loss_pct == pytest.approx(5, rel=0.1)


def test_the_recorded_trace_holds_what_the_counters_say(helper, tmp_path):
    ge = impair.GilbertElliott.from_mean(5, 4)
    c = simulate(helper, 40_000, flags_of(ge), out=tmp_path / "g.trace")
    t = read_trace(tmp_path / "g.trace")
    assert t.packets == c["packets"] and len(t.dropped) == c["drops"]
    runs = 1 + np.count_nonzero(np.diff(t.dropped) > 1)   # runs of consecutive drops
    assert runs == c["bursts"]


def test_a_trace_replays_position_by_position_and_nothing_past_its_end(helper, tmp_path):
    simulate(helper, 20_000, flags_of(impair.GilbertElliott.from_mean(10, 3)),
             out=tmp_path / "rec.trace")
    c = simulate(helper, 26_000, ["--trace", str(tmp_path / "rec.trace")],
                 out=tmp_path / "again.trace")
    rec, again = read_trace(tmp_path / "rec.trace"), read_trace(tmp_path / "again.trace")
    assert c["model"] == "trace" and c["trace_packets"] == 20_000 and c["packets"] == 26_000
    assert np.array_equal(rec.dropped, again.dropped)
    assert again.packets == 26_000 and again.dropped.max() < 20_000


def test_the_helper_refuses_a_trace_with_chain_options(helper, tmp_path):
    simulate(helper, 100, flags_of(ReplayUniform(5)), out=tmp_path / "t.trace")
    bad = [str(helper), "simulate", "--packets", "9", "--trace", str(tmp_path / "t.trace"),
           "--p-gb", "0"]
    assert subprocess.run(bad, capture_output=True).returncode == 2
    assert subprocess.run([str(helper), "dump", "--dev", "x"], capture_output=True
                          ).returncode == 2


# ---- trace files ---------------------------------------------------------------------------

def test_bad_trace_files_get_one_sentence(tmp_path, helper):
    (tmp_path / "x.trace").write_bytes(b"nonsense")
    with pytest.raises(TraceError, match="not a loss trace"):
        read_trace(tmp_path / "x.trace")
    simulate(helper, 1000, flags_of(ReplayUniform(20)), out=tmp_path / "ok.trace")
    data = (tmp_path / "ok.trace").read_bytes()
    (tmp_path / "short.trace").write_bytes(data[:-8])
    with pytest.raises(TraceError, match="cut short"):
        read_trace(tmp_path / "short.trace")
    (tmp_path / "lie.trace").write_bytes(data[:16] + (10**6).to_bytes(8, "little") + data[24:])
    with pytest.raises(TraceError, match="drops but holds"):
        read_trace(tmp_path / "lie.trace")
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "absent.trace")


def test_a_trace_folder_gives_each_host_its_file_and_the_mean_loss(tmp_path, helper):
    simulate(helper, 10_000, flags_of(ReplayUniform(10)), out=tmp_path / "ps1.trace")
    simulate(helper, 30_000, flags_of(ReplayUniform(2)), stream=1, out=tmp_path / "w1.trace")
    model = parse_loss(f"trace:{tmp_path}")
    assert isinstance(model, Trace) and model.text() == f"trace:{tmp_path}"
    assert model.files().get("ps1") == tmp_path / "ps1.trace" and "w2" not in model.files()
    drops = sum(len(read_trace(tmp_path / f).dropped) for f in ("ps1.trace", "w1.trace"))
    assert model.mean_loss_pct == pytest.approx(100 * drops / 40_000)


# ---- the ingress ---------------------------------------------------------------------------

class FakeHosts:
    """A host runner that records the commands it is asked to run."""

    def __init__(self, folder: Path, names=("ps1", "w1", "w2")) -> None:
        self.folder, self.names, self.calls = folder, list(names), []

    def host_names(self):
        return self.names

    def host_run(self, host, *args):
        self.calls.append((host, list(args)))
        return ""


def test_the_ingress_replays_each_host_its_own_trace_and_records_the_chained(tmp_path, helper):
    traces = tmp_path / "loss"
    traces.mkdir()
    simulate(helper, 1000, flags_of(ReplayUniform(5)), out=traces / "ps1.trace")
    hosts = FakeHosts(tmp_path)
    ingress = Ingress(hosts)
    ingress.delay.set_hosts = lambda delays: None     # no delay line here
    ingress.configure(Impairment(f"trace:{traces}"))
    attached = {h: args for h, args in hosts.calls if "attach" in args}
    assert list(attached) == ["ps1"] and attached["ps1"][-2:] == ["--trace",
                                                                  str(traces / "ps1.trace")]
    assert ingress.chained("ps1") and not ingress.chained("w1")
    hosts.calls.clear()
    ingress.record(tmp_path / "out")
    dumps = [(h, args) for h, args in hosts.calls if "dump" in args]
    assert dumps == [("ps1", impair.ge_argv("dump", "ps1-eth0", tmp_path / "out" / "ps1.trace"))]
