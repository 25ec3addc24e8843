"""How a run's wait ends: all done, a crash, the run's timeout, or a worker stuck after the PS."""

import time

from harness.running.runner import wait as _wait


class FakeProc:
    """Exits with ``code`` once ``after_s`` have passed (never, if ``after_s`` is None)."""

    def __init__(self, tmp_path, name, after_s, code=0):
        self.t_end = None if after_s is None else time.monotonic() + after_s
        self.code = code
        self.log_path = tmp_path / f"{name}.log"
        self.log_path.write_text(f"{name} started\n{name} said goodbye\n")

    def poll(self):
        return None if self.t_end is None or time.monotonic() < self.t_end else self.code


def test_ok_when_every_process_exits_cleanly(tmp_path):
    procs = {"ps1": FakeProc(tmp_path, "ps1", 0.2), "w1": FakeProc(tmp_path, "w1", 0.3)}
    assert _wait(procs, time.monotonic() + 10) == ("ok", "")


def test_a_crash_names_the_host_and_its_last_line(tmp_path):
    procs = {"ps1": FakeProc(tmp_path, "ps1", None), "w1": FakeProc(tmp_path, "w1", 0.1, code=3)}
    status, reason = _wait(procs, time.monotonic() + 10)
    assert status == "crash"
    assert reason == "w1 exited with code 3: w1 said goodbye"


def test_the_run_timeout_names_who_is_still_running(tmp_path):
    procs = {"ps1": FakeProc(tmp_path, "ps1", None), "w1": FakeProc(tmp_path, "w1", 0.1)}
    assert _wait(procs, time.monotonic() + 0.5) == (
        "timeout", "still running at the deadline: ps1")


def test_a_worker_stuck_after_the_ps_finished_ends_the_wait_early(tmp_path):
    procs = {"ps1": FakeProc(tmp_path, "ps1", 0.1), "w1": FakeProc(tmp_path, "w1", 0.1),
             "w2": FakeProc(tmp_path, "w2", None)}
    t0 = time.monotonic()
    status, reason = _wait(procs, t0 + 60, grace_s=0.5)
    assert (status, reason) == ("timeout", "still running 0.5 s after the PS finished: w2")
    assert time.monotonic() - t0 < 5


def test_a_slow_worker_within_the_grace_is_ok(tmp_path):
    procs = {"ps1": FakeProc(tmp_path, "ps1", 0.1), "w1": FakeProc(tmp_path, "w1", 0.6)}
    assert _wait(procs, time.monotonic() + 60, grace_s=2.0) == ("ok", "")


def test_a_ps_stuck_after_every_worker_finished_ends_the_wait_early(tmp_path):
    procs = {"ps1": FakeProc(tmp_path, "ps1", None), "w1": FakeProc(tmp_path, "w1", 0.1),
             "w2": FakeProc(tmp_path, "w2", 0.2)}
    t0 = time.monotonic()
    status, reason = _wait(procs, t0 + 60, workers_grace_s=0.5)
    assert (status, reason) == ("timeout", "still running 0.5 s after every worker finished: ps1")
    assert time.monotonic() - t0 < 5


def test_a_worker_killed_on_purpose_is_no_crash(tmp_path):
    procs = {"ps1": FakeProc(tmp_path, "ps1", 0.3), "w1": FakeProc(tmp_path, "w1", 0.05, code=-9)}
    ticks = []
    assert _wait(procs, time.monotonic() + 10, tick=lambda: ticks.append(1),
                 killed=lambda: {"w1"}) == ("ok", "")
    assert ticks   # the fault injector is driven from the wait
