"""A worker's own process forges the PS and another worker on the emulated network (issue 29 item
1): it holds the key of its own pair with the PS, nothing else, and every forgery fails its tag.

A 4-worker LTP run trains with ``auth`` on while, in the last worker's namespace, a second process
is handed that host's keys exactly as its worker is (the runner's pipe, ``--keys-fd``) and runs
the attacker of ``test_attack.py`` sealing under that key: eight classes of forgery "from" worker
0 to the PS and "from" the PS to worker 0, spoofed sources, each class with its own IP TTL and an
nftables counter at each victim's ingress. With one key per run (before issue 29) that process
could derive every direction's key and its well-formed forgeries were accepted; with keys per
pair every forgery that arrived is counted exactly once, as malformed (garbage) or as failing its
MAC (everything else), nothing else moves (no replay, no unknown peer), and the run trains.

Needs root, Mininet and Open vSwitch (``sudo .venv/bin/pytest tests/emulation/test_insider.py``).
"""

import json
import time

from harness.running.runfiles import RunFiles
from harness.running.runner import collect, launched, node_commands, prepare, spawn_plain, wait
from harness.running.spec import RunSpec
from tests.emulation.conftest import network_fixture
from tests.emulation.test_attack import (ATTACKER_HOST, GRADIENT_BYTES, ITERATIONS, N_WORKERS,
                                         VICTIM_HOSTS, _arrived, _count_forgeries)
from topologies.incast import IncastParams
from transports import native

testbed = network_fixture("insider", IncastParams(n_workers=N_WORKERS, bottleneck_mbps=100,
                                                   queue_pkts=64))


def test_a_worker_holding_its_own_pair_key_forges_no_other_pair(testbed, tmp_path):
    tb = testbed
    spec = RunSpec(transport="ltp", transport_options={"auth": True}, n_workers=N_WORKERS,
                   iterations=ITERATIONS, eval_every=20, timeout_s=300)
    prep = prepare(tb, spec, tmp_path / "run")
    for host in VICTIM_HOSTS.values():
        _count_forgeries(tb, host)
    report = tmp_path / "attack.json"
    # The attacking host's own handover: the key of its pair with the PS, as its worker has it.
    attacker = spawn_plain(tb)(
        ATTACKER_HOST, "tests.emulation.attacker",
        ["--run", str(prep.files.dir), "--session-id", str(prep.session.session_id),
         "--iterations", str(ITERATIONS), "--bytes", str(GRADIENT_BYTES), "--auth", "1",
         "--port", str(spec.port), "--report", str(report)],
        tmp_path / "attacker.log", prep.keys[ATTACKER_HOST])
    before = tb.meter.snapshot()
    t0 = time.monotonic()
    try:
        with launched(spawn_plain(tb), node_commands(spec, prep.files), prep.keys) as procs:
            status, reason = wait(procs, t0 + spec.timeout_s)
        wall_s = time.monotonic() - t0
        deadline = time.monotonic() + 30
        while attacker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        attacker.kill()
    row, _, _ = collect(tb, prep, before, tb.meter.snapshot(), status, reason, wall_s, "test")
    assert attacker.poll() == 0 and report.exists(), (tmp_path / "attacker.log").read_text()[-2000:]
    sent = json.loads(report.read_text())
    files = RunFiles(prep.files.dir)
    assert row["status"] == "ok", row["reason"]
    assert row["final_accuracy"] > 0.6
    print(f"an insider's forgeries sent: {sent}")
    for victim, host in VICTIM_HOSTS.items():
        arrived, stats = _arrived(tb, host), files.host_summary(host).transport_stats
        assert sum(arrived.values()) > 500, (victim, arrived, sent[victim])
        assert stats["malformed"] == arrived["garbage"], (victim, stats, arrived)
        assert stats["bad_mac"] == sum(arrived.values()) - arrived["garbage"], (victim, stats,
                                                                                 arrived)
        others = {n: stats[n] for n in native.rejection_stats()
                  if n not in ("malformed", "bad_mac")}
        assert not any(others.values()), (victim, others)
    assert not list(prep.files.dir.rglob("*.key")), "a key file in the run folder"
