"""Forged datagrams on the real emulated network, during LTP training, with and without the MAC.

An attacker in the namespace of the last worker (``tests/emulation/attacker.py``: raw socket,
spoofed sources; it says there what lets a forged datagram reach its victim) sprays eight classes
of forgery at the PS ("from" worker 0) and at worker 0 ("from" the PS) while a 4-worker LTP run
trains: garbage, another session, the wrong message size, message ids far ahead, well-formed
DATA of the right size for the run's message ids, ACKs and CLOSEs that echo transmissions the
victim never made, and HELLO / HELLO_ACK. Each class leaves with its own IP TTL, and an nftables
counter at each victim's ingress counts what arrived of it, so the victims' transport counters
can be held against exact numbers.

With authentication (``auth``) on, nothing the attacker sends is accepted: every arrived forgery
is counted, as malformed (garbage) or as failing its MAC (everything else), and nothing else is.
Without it the checks that need no key still refuse what they can tell (garbage, another session,
the wrong size, ids outside the window), ACKs and CLOSEs that echo nothing sent are refused or
ignored, contexts kept busy by forgeries give way to the ids the application needs, and the run
still completes, but this gets through: forged DATA of the right size and a current message id is
taken in. Where the genuine copy arrives while the message is open it disputes the forged one
(delivered as missing, counted); where the message closes first (its first packet, forged,
started its max-wait clock early) the forged floats are delivered as data: in our runs they wrecked
the model (final accuracy 0.10, chance). Forged HELLOs are answered too (worker 0 then counts
HELLO_ACKs it never asked for). Only the MAC stops forged DATA.
"""

import json
import sys
import time

from harness.running.runfiles import RunFiles
from harness.running.runner import collect, launched, node_commands, prepare, spawn_plain, wait
from harness.running.spec import RunSpec
from harness.training import models
from tests.emulation.conftest import network_fixture
from topologies.incast import IncastParams, worker_name
from topologies.testbed.network import Testbed
from transports import native

from tests.emulation.attacker import CLASS_TTL

N_WORKERS = 4
ITERATIONS = 40
GRADIENT_BYTES = 4 * models.n_params("mlp")   # what a worker pushes: the MLP's gradient
VICTIM_HOSTS = {"ps": "ps1", "worker": worker_name(0)}
ATTACKER_HOST = worker_name(N_WORKERS - 1)


testbed = network_fixture("attack", IncastParams(n_workers=N_WORKERS, bottleneck_mbps=100,
                                                  queue_pkts=64))


def _count_forgeries(tb: Testbed, host: str) -> None:
    """(Re)install a counter per forgery class at ``host``'s ingress, by the class's TTL."""
    counters = "".join(f"    counter c{ttl} {{ }}\n" for ttl in CLASS_TTL.values())
    rules = "".join(f'        ip ttl {ttl} counter name "c{ttl}"\n' for ttl in CLASS_TTL.values())
    script = tb.folder / f".attack-{host}.nft"
    script.write_text(f"table netdev ltp_attack\ndelete table netdev ltp_attack\n"
                      f"table netdev ltp_attack {{\n{counters}"
                      f"    chain ingress {{\n"
                      f'        type filter hook ingress device "{host}-eth0" priority -400; '
                      f"policy accept;\n{rules}    }}\n}}\n")
    tb.host_run(host, "nft", "-f", str(script))
    script.unlink()


def _arrived(tb: Testbed, host: str) -> dict[str, int]:
    out = json.loads(tb.host_run(host, "nft", "-j", "list", "counters", "table", "netdev",
                                 "ltp_attack"))
    by_ttl = {int(c["counter"]["name"][1:]): int(c["counter"]["packets"])
              for c in out["nftables"] if "counter" in c}
    return {cls: by_ttl[ttl] for cls, ttl in CLASS_TTL.items()}


def attacker_args(prep, spec: RunSpec, report, auth: bool) -> list[str]:
    """The attacker's command-line arguments against the run ``prep`` of ``spec``."""
    return ["--run", str(prep.files.dir), "--session-id", str(prep.session.session_id),
            "--iterations", str(ITERATIONS), "--bytes", str(GRADIENT_BYTES),
            "--auth", str(int(auth)), "--port", str(spec.port), "--report", str(report)]


def run_under_attack(tb: Testbed, folder, spec: RunSpec, start_attacker) -> dict:
    """Train ``spec`` while the attacker ``start_attacker(prep, report)`` starts (a process that
    writes what it sent to ``report``) forges at the victims; the run's row, what the attacker
    sent, what arrived at each victim, the victims' transport counters, and the run."""
    prep = prepare(tb, spec, folder / "run")
    for host in VICTIM_HOSTS.values():
        _count_forgeries(tb, host)
    report = folder / "attack.json"
    attacker = start_attacker(prep, report)
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
    assert attacker.poll() == 0 and report.exists(), (folder / "attacker.log").read_text()[-2000:]
    files = RunFiles(prep.files.dir)
    return {"row": row, "sent": json.loads(report.read_text()), "prep": prep,
            "arrived": {v: _arrived(tb, h) for v, h in VICTIM_HOSTS.items()},
            "stats": {v: files.host_summary(h).transport_stats for v, h in VICTIM_HOSTS.items()}}


def _attacked_run(tb: Testbed, folder, auth: bool) -> dict:
    spec = RunSpec(transport="ltp", transport_options={"auth": auth}, n_workers=N_WORKERS,
                   iterations=ITERATIONS, eval_every=20, timeout_s=300)
    return run_under_attack(tb, folder, spec, lambda prep, report: tb.start_process(
        ATTACKER_HOST, [sys.executable, "-m", "tests.emulation.attacker",
                        *attacker_args(prep, spec, report, auth)], folder / "attacker.log"))


def test_with_auth_nothing_forged_is_accepted(testbed, tmp_path):
    got = _attacked_run(testbed, tmp_path, auth=True)
    assert got["row"]["status"] == "ok", got["row"]["reason"]
    assert got["row"]["final_accuracy"] > 0.6
    for victim in VICTIM_HOSTS:
        arrived, stats = got["arrived"][victim], got["stats"][victim]
        assert sum(arrived.values()) > 500, (victim, arrived, got["sent"][victim])
        # Every forgery that arrived is counted once, and as nothing else.
        assert stats["malformed"] == arrived["garbage"], (victim, stats, arrived)
        assert stats["bad_mac"] == sum(arrived.values()) - arrived["garbage"], (victim, stats, arrived)
        others = {n: stats[n] for n in native.rejection_stats() if n not in ("malformed", "bad_mac")}
        assert not any(others.values()), (victim, others)
        assert stats["dup_conflict"] == 0
    assert got["row"]["rejected_datagrams"] == sum(sum(a.values()) for a in got["arrived"].values())


def test_without_auth_the_run_completes_and_this_gets_through(testbed, tmp_path):
    got = _attacked_run(testbed, tmp_path, auth=False)
    assert got["row"]["status"] == "ok", got["row"]["reason"]
    print(f"without auth: final accuracy {got['row']['final_accuracy']:.3f} "
          f"(forged floats that closed a message before their genuine copy reached the model)")
    for victim in VICTIM_HOSTS:
        arrived, stats = got["arrived"][victim], got["stats"][victim]
        assert sum(arrived.values()) > 500, (victim, arrived, got["sent"][victim])
        # Refused by what a receiver knows without a key, each exactly once:
        assert stats["malformed"] == arrived["garbage"], (victim, stats, arrived)
        assert stats["wrong_session"] == arrived["wrong_session"], (victim, stats, arrived)
        assert stats["bad_shape"] == arrived["wrong_shape"], (victim, stats, arrived)
        assert stats["out_of_window"] == arrived["far_ids"], (victim, stats, arrived)
        assert stats["bad_mac"] == 0 and stats["sends_stale"] == 0
        # Got through: well-formed DATA of a current message id was taken in; each copy the
        # genuine sender then sent disputed it (delivered as missing, counted).
        assert stats["dup_conflict"] > 0, (victim, stats)
    # Got through: the PS answered forged HELLOs, and worker 0 got HELLO_ACKs it never asked for
    # (counted with the forged HELLO_ACKs sent to it directly).
    assert got["stats"]["worker"]["bad_echo"] > got["arrived"]["worker"]["hello"] > 0
