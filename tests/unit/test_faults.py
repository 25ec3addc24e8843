"""Faults that must fit their run, and the injector's timing, with fake processes (the
emulation tests use real ones)."""

import json
import signal

import pytest

from harness.hosts import faults
from harness.hosts.faults import Fault, FaultError, FaultInjector, parse_fault


def test_a_fault_must_fit_the_run():
    with pytest.raises(FaultError, match="has only 4 workers"):
        faults.check_fault(parse_fault("kill@3:w5"), 4, 10)
    with pytest.raises(FaultError, match="never reaches"):
        faults.check_fault(parse_fault("kill@30"), 4, 10)
    faults.check_fault(parse_fault("kill@9"), 4, 10)
    assert parse_fault("kill@3").rank(4) == 3


class _Ref:
    pid = 4242


class _Proc:
    ref = _Ref()

    def __init__(self):
        self.killed = 0

    def kill(self):
        self.killed += 1


def test_a_stall_stops_at_its_iteration_and_continues_after_its_time(tmp_path, monkeypatch):
    sent = []
    monkeypatch.setattr(faults.os, "killpg", lambda pid, sig: sent.append((pid, sig)))
    clock = {"now": 100.0, "it": 0}
    monkeypatch.setattr(faults.time, "monotonic", lambda: clock["now"])
    inj = FaultInjector(parse_fault("stall@3:2s"), "w4", lambda: clock["it"], {"w4": _Proc()},
                        tmp_path / "faults.jsonl")
    inj.tick()
    assert sent == []
    clock["it"] = 3
    inj.tick()
    assert sent == [(4242, signal.SIGSTOP)]
    clock["now"] += 1.0
    inj.tick()
    assert len(sent) == 1
    clock["now"] += 1.5
    inj.tick()
    assert sent[-1] == (4242, signal.SIGCONT) and inj.ended
    events = [json.loads(line)["event"] for line in (tmp_path / "faults.jsonl").open()]
    assert events == ["stopped", "continued"]


def test_a_restart_kills_then_starts_a_new_process(tmp_path, monkeypatch):
    clock = {"now": 0.0}
    monkeypatch.setattr(faults.time, "monotonic", lambda: clock["now"])
    old, new = _Proc(), _Proc()
    procs = {"w2": old}
    inj = FaultInjector(parse_fault("restart@1:1s:w2"), "w2", lambda: 1, procs,
                        tmp_path / "f.jsonl", restart=lambda host: new)
    inj.tick()
    assert old.killed == 1 and procs["w2"] is old
    clock["now"] = 1.5
    inj.tick()
    assert procs["w2"] is new and inj.ended


def test_a_link_cut_is_restored_when_the_run_ends_early(tmp_path):
    calls = []
    inj = FaultInjector(parse_fault("link@0:60s"), "w1", lambda: 0, {}, tmp_path / "f.jsonl",
                        cut=lambda h: calls.append(("cut", h)) or 1.0,
                        restore=lambda h: calls.append(("restore", h)) or 2.0)
    inj.tick()
    inj.finish()
    assert calls == [("cut", "w1"), ("restore", "w1")]


def test_a_link_event_is_dated_by_the_controller(tmp_path):
    """The controller's own time of the change, on the monotonic clock, not the call's return."""
    import time
    acted = time.time() - 0.5   # the controller changed the switch half a second ago
    inj = FaultInjector(parse_fault("link@0:60s"), "w1", lambda: 0, {}, tmp_path / "f.jsonl",
                        cut=lambda h: acted, restore=lambda h: time.time())
    inj.tick()
    rec = json.loads((tmp_path / "f.jsonl").read_text().splitlines()[0])
    assert rec["t"] == acted and abs((time.monotonic() - rec["mono"]) - 0.5) < 0.05
