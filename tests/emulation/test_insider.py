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

from harness.running.runner import spawn_plain
from harness.running.spec import RunSpec
from tests.emulation.conftest import network_fixture
from tests.emulation.test_attack import (ATTACKER_HOST, ITERATIONS, N_WORKERS, VICTIM_HOSTS,
                                         attacker_args, run_under_attack)
from topologies.incast import IncastParams
from transports import native

testbed = network_fixture("insider", IncastParams(n_workers=N_WORKERS, bottleneck_mbps=100,
                                                   queue_pkts=64))


def test_a_worker_holding_its_own_pair_key_forges_no_other_pair(testbed, tmp_path):
    tb = testbed
    spec = RunSpec(transport="ltp", transport_options={"auth": True}, n_workers=N_WORKERS,
                   iterations=ITERATIONS, eval_every=20, timeout_s=300)
    # The attacking host's own handover: the key of its pair with the PS, as its worker has it.
    got = run_under_attack(tb, tmp_path, spec, lambda prep, report: spawn_plain(tb)(
        ATTACKER_HOST, "tests.emulation.attacker", attacker_args(prep, spec, report, True),
        tmp_path / "attacker.log", prep.keys[ATTACKER_HOST]))
    row, sent, prep = got["row"], got["sent"], got["prep"]
    assert row["status"] == "ok", row["reason"]
    assert row["final_accuracy"] > 0.6
    print(f"an insider's forgeries sent: {sent}")
    for victim in VICTIM_HOSTS:
        arrived, stats = got["arrived"][victim], got["stats"][victim]
        assert sum(arrived.values()) > 500, (victim, arrived, sent[victim])
        assert stats["malformed"] == arrived["garbage"], (victim, stats, arrived)
        assert stats["bad_mac"] == sum(arrived.values()) - arrived["garbage"], (victim, stats,
                                                                                 arrived)
        others = {n: stats[n] for n in native.rejection_stats()
                  if n not in ("malformed", "bad_mac")}
        assert not any(others.values()), (victim, others)
    assert not list(prep.files.dir.rglob("*.key")), "a key file in the run folder"
