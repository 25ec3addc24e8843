"""The delay line without root: validation, the helper's command line, the iptables rules, and
the order in which DelayLine starts and stops things (against a recording fake testbed)."""

import json
import math

import pytest

from topologies.impair import delay
from topologies.impair.delay import DelayError, DelayLine

COUNTERS = {"queue": 7, "packets": 12, "max_backlog": 3, "late_1ms": 0}


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A stand-in for the built helper, so these tests do not need the C build."""
    fake = tmp_path / "nfq-delay"
    fake.write_text("")
    monkeypatch.setattr(delay, "BINARY", fake)
    return fake


class FakeProcess:
    def __init__(self, bed, host, log_path, behaviour):
        self.bed, self.host, self.log_path = bed, host, log_path
        self.exit_code = None
        if behaviour == "ready":
            self._write("ready\n")
        elif behaviour == "crash":
            self._write("nfq-delay: cannot bind queue 7\n")
            self.exit_code = 1

    def _write(self, text):
        with open(self.log_path, "a") as f:
            f.write(text)

    def poll(self):
        return self.exit_code

    def kill(self):
        self.bed.calls.append(("kill", self.host))
        if self.exit_code is None:
            self._write(json.dumps(COUNTERS) + "\n")
            self.exit_code = 0


class FakeTestbed:
    """Records start_process / host_run / kill in order; behaviour per host is configurable."""

    def __init__(self, folder, hosts=("ps1", "w1", "w2")):
        self.folder = folder
        self.hosts = list(hosts)
        self.calls = []
        self.behaviour = {}  # host -> "ready" (default), "crash" or "silent"
        self.fail_rule_on = set()

    def host_names(self):
        return list(self.hosts)

    def host_run(self, host, *args):
        self.calls.append(("run", host, list(args)))
        if host in self.fail_rule_on and "-A" in args:
            raise RuntimeError("iptables failed")
        return ""

    def start_process(self, host, argv, log_path):
        self.calls.append(("start", host, list(argv)))
        return FakeProcess(self, host, log_path, self.behaviour.get(host, "ready"))

    def kinds(self):
        return [c[0] for c in self.calls]



# ---- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ok", [0, 0.5, 10, 250.25, 1000])
def test_delays_from_0_to_1000_ms_are_accepted(ok):
    assert delay.check_delay(ok) == float(ok)


@pytest.mark.parametrize("bad", [-0.001, 1000.001, math.nan, math.inf, -math.inf, "10", None, True])
def test_other_delays_are_rejected_with_a_sentence(bad):
    with pytest.raises(DelayError) as err:
        delay.check_delay(bad)
    msg = str(err.value)
    assert msg.startswith("delay_ms must be") and msg.endswith(".") and msg.count(". ") == 0


def test_delay_error_is_a_value_error():
    assert issubclass(DelayError, ValueError)


def test_a_bad_delay_starts_nothing(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    with pytest.raises(DelayError):
        DelayLine(bed).set(-1)
    assert bed.calls == []


def test_a_missing_helper_says_to_run_setup(tmp_path, monkeypatch):
    monkeypatch.setattr(delay, "BINARY", tmp_path / "absent" / "nfq-delay")
    with pytest.raises(DelayError, match=r"run \./setup\.sh"):
        delay.binary()
    bed = FakeTestbed(tmp_path)
    with pytest.raises(DelayError, match="setup.sh"):
        DelayLine(bed).set(5)
    assert bed.calls == []


# ---- generated commands --------------------------------------------------------------------------

def test_helper_command_line(built):
    assert delay.helper_argv(10) == [str(built), "--queue", "7", "--delay-ms", "10.0"]
    assert delay.helper_argv(0.5, queue_num=3)[-3:] == ["3", "--delay-ms", "0.5"]
    assert delay.helper_argv(0.1)[-1] == "0.1"  # no rounding to a fixed number of digits


def test_real_time_priority_is_optional_and_checked(built):
    assert "--rt-priority" not in delay.helper_argv(1)
    assert delay.helper_argv(1, rt_priority=10)[-2:] == ["--rt-priority", "10"]
    for bad in (-1, 100, 1.5, True):
        with pytest.raises(DelayError, match="rt_priority must be"):
            delay.helper_argv(1, rt_priority=bad)
    for bad in (-1, 65536, "7"):
        with pytest.raises(DelayError, match="queue_num must be"):
            delay.helper_argv(1, queue_num=bad)


def test_rule_queues_ipv4_ingress_of_the_host_interface():
    assert delay.rule_args("w3-eth0") == [
        "iptables-nft", "-w", "-t", "raw", "-A", "PREROUTING", "-i", "w3-eth0",
        "-j", "NFQUEUE", "--queue-num", "7", "--queue-bypass"]
    deleted = delay.rule_args("ps1-eth0", 9, "-D")
    assert deleted[4] == "-D" and deleted[-3:] == ["--queue-num", "9", "--queue-bypass"]
    with pytest.raises(DelayError):
        delay.rule_args("w1-eth0", action="-F")


def test_counters_are_the_last_json_line():
    text = "ready\n" + json.dumps({"packets": 1}) + "\n" + json.dumps(COUNTERS) + "\n"
    assert delay.parse_counters(text) == COUNTERS
    assert delay.parse_counters("ready\n") is None
    assert delay.parse_counters('ready\n{"packets": 3, "max_bac') is None  # killed mid-line


# ---- lifecycle -----------------------------------------------------------------------------------

def test_set_starts_every_helper_before_any_rule(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    line = DelayLine(bed)
    line.set(10)
    assert line.delay_ms == 10.0
    assert bed.kinds() == ["start"] * 3 + ["run"] * 3
    assert [c[1] for c in bed.calls[:3]] == ["ps1", "w1", "w2"]
    assert all(c[2][1:] == ["--queue", "7", "--delay-ms", "10.0"] for c in bed.calls[:3])
    rules = {c[1]: c[2] for c in bed.calls[3:]}
    assert rules == {h: delay.rule_args(f"{h}-eth0", 7, "-A") for h in ("ps1", "w1", "w2")}
    assert all((tmp_path / f"nfq-delay-{h}.log").exists() for h in ("ps1", "w1", "w2"))


def test_zero_removes_rules_before_stopping_helpers(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    line = DelayLine(bed)
    line.set(10)
    bed.calls.clear()
    line.set(0)
    assert line.delay_ms == 0.0
    assert bed.kinds() == ["run"] * 3 + ["kill"] * 3
    assert all(c[2][4] == "-D" for c in bed.calls[:3])
    assert line.counters == {h: COUNTERS for h in ("ps1", "w1", "w2")}


def test_same_value_is_a_no_op_and_a_new_value_restarts(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    line = DelayLine(bed)
    line.set(0)
    assert bed.calls == []
    line.set(5)
    bed.calls.clear()
    line.set(5.0)
    assert bed.calls == []
    line.set(0.5)
    assert bed.kinds() == ["run"] * 3 + ["kill"] * 3 + ["start"] * 3 + ["run"] * 3
    assert all(c[2][-1] == "0.5" for c in bed.calls if c[0] == "start")
    assert line.delay_ms == 0.5


def test_stop_is_idempotent_and_works_as_a_context_manager(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    with DelayLine(bed) as line:
        line.set(1)
    n = len(bed.calls)
    line.stop()
    line.stop()
    assert len(bed.calls) == n
    assert bed.kinds().count("kill") == 3


def test_a_helper_that_dies_at_start_is_reported_and_everything_stopped(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    bed.behaviour["w1"] = "crash"
    line = DelayLine(bed)
    with pytest.raises(DelayError, match="nfq-delay on w1 exited before it was ready"):
        line.set(10)
    assert "run" not in bed.kinds()  # no rule without a ready helper
    assert bed.kinds().count("kill") == 3
    assert line.delay_ms == 0.0


def test_a_helper_that_never_gets_ready_times_out(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    bed.behaviour["w2"] = "silent"
    line = DelayLine(bed, ready_s=0.05)
    with pytest.raises(DelayError, match="not ready within"):
        line.set(10)
    assert bed.kinds().count("kill") == 3


def test_a_failed_rule_removes_the_rules_already_in_place(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    bed.fail_rule_on.add("w1")
    line = DelayLine(bed)
    with pytest.raises(RuntimeError):
        line.set(10)
    removed = [c[1] for c in bed.calls if c[0] == "run" and c[2][4] == "-D"]
    assert removed == ["ps1"]  # installed before w1 failed
    kills = [i for i, c in enumerate(bed.calls) if c[0] == "kill"]
    last_rule = max(i for i, c in enumerate(bed.calls) if c[0] == "run")
    assert len(kills) == 3 and min(kills) > last_rule


def test_a_restart_waits_for_the_new_ready_line_not_the_old_one(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    line = DelayLine(bed, ready_s=0.05)
    line.set(10)
    bed.behaviour["ps1"] = "silent"  # its log already says "ready" from the first start
    with pytest.raises(DelayError, match="nfq-delay on ps1 was not ready"):
        line.set(20)


def test_the_same_value_restarts_a_helper_that_died(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    line = DelayLine(bed)
    line.set(10)
    line._procs["w1"][0].exit_code = 1
    bed.calls.clear()
    line.set(10)
    assert bed.kinds().count("start") == 3 and line.delay_ms == 10.0


def test_a_bad_setting_leaves_the_running_delay_alone(tmp_path, built):
    bed = FakeTestbed(tmp_path)
    line = DelayLine(bed)
    line.set(10)
    line.rt_priority = 200
    bed.calls.clear()
    with pytest.raises(DelayError, match="rt_priority"):
        line.set(20)
    assert bed.calls == [] and line.delay_ms == 10.0
    line.set(0)  # turning it off needs no valid helper settings
    assert line.delay_ms == 0.0
