"""Each host of a run gets only its own pairs' keys, through a pipe it inherits, and no key file is
left in the run folder (harness/running/keys.py, the runner's launchers, the fork server)."""

import hashlib
import json
import os
import socket
import subprocess
import threading
import time
import types

import pytest

from harness.hosts import zygote
from harness.running import keys, provenance, runner
from harness.running.spec import RunSpec
from topologies.incast import PS_NAME, worker_name
from topologies.testbed.process import HostProcess
from transports.base import SERVER, KeyMissing, Session
from transports.session import pair_name, sender_name

N = 3


def _parties(pattern: str) -> dict[str, int]:
    """Each host's party: the ps pattern's PS is SERVER; a collective's PS host is member N."""
    ps = SERVER if pattern == "ps" else N
    return {PS_NAME: ps, **{worker_name(r): r for r in range(N)}}


@pytest.mark.parametrize("pattern", ["ps", "tree", "ring:pieces=2"])
def test_each_host_holds_the_keys_of_its_own_pairs_and_no_other(pattern):
    session = Session.draw()
    handed = keys.run_keys(session, pattern, N)
    parties = _parties(pattern.split(":")[0])
    assert set(handed) == set(parties)
    everyone = sorted(set(parties.values()))
    for host, s in handed.items():
        me = parties[host]
        mine = ({pair_name(SERVER, r) for r in range(N)} if me == SERVER
                else {pair_name(me, SERVER)} if pattern == "ps"
                else {pair_name(me, o) for o in everyone if o != me})
        assert set(s.holds()) == mine and s.secret is None and s.session_id == session.session_id
        for name in mine:
            assert s.key(name) == session.key(name)
        for a in everyone:        # every other pair of the run: out of reach
            for b in everyone:
                if a < b and pair_name(a, b) not in mine:
                    with pytest.raises(KeyMissing):
                        s.key(pair_name(a, b))


def test_a_peer_holds_its_pairs_and_the_senders_keys():
    session = Session.draw()
    handed = keys.peer_keys(session, N)
    for r in range(N):
        assert set(handed[worker_name(r)].holds()) == (
            {pair_name(r, s) for s in range(N) if s != r} | {sender_name(s) for s in range(N)})
    with pytest.raises(KeyMissing):
        handed[worker_name(0)].pair_key(1, 2)


def test_the_handover_round_trips_and_never_carries_the_secret():
    session = Session.draw()
    handed = keys.run_keys(session, "ps", N)[worker_name(1)]
    blob = keys.encode(handed)
    assert keys.decode(blob) == handed
    assert session.secret.hex() not in blob.decode()
    with pytest.raises(ValueError, match="never handed"):
        keys.encode(session)
    big = session.handover(pair_name(r, SERVER) for r in range(2000))   # past a default pipe
    fd = keys.pipe_fd(keys.encode(big))
    assert keys.read_fd(fd) == big


def _digests(session: Session, names) -> dict[str, str]:
    return {n: hashlib.blake2b(session.key(n)).hexdigest() for n in names}


class _Ledger:
    def add_process(self, section, ref):
        pass

    def remove_process(self, section, ref):
        pass


class _Testbed:
    """What prepare and spawn_plain use of a Testbed: nothing emulated; a host's process is a
    plain child (Testbed.start_process runs it through mnexec, which keeps pass_fds)."""

    def __init__(self):
        self.params = types.SimpleNamespace(worker_names=[worker_name(r) for r in range(N)])
        nothing = types.SimpleNamespace(configure=lambda *a, **k: None)
        self.ingress, self.queue = nothing, nothing
        self.meter = types.SimpleNamespace(rtt_ms=lambda host: 0.1)
        self.ledger = _Ledger()

    def reset_routes(self):
        pass

    def host_run(self, *args):
        return ""

    def controller_errors(self):
        return []

    def start_process(self, host, argv, log_path, env=None, pass_fds=()):
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     pass_fds=pass_fds, start_new_session=True)
        return HostProcess(host, log_path, self.ledger, popen=popen)


def _everything_in(folder) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_a_run_hands_each_host_process_its_keys_and_leaves_no_key_file(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "fingerprint",
                        lambda kind: types.SimpleNamespace(digest="test"))
    tb = _Testbed()
    spec = RunSpec(transport="ltp", n_workers=N, iterations=1)
    prep = runner.prepare(tb, spec, tmp_path / "run")
    assert set(prep.keys) == {PS_NAME, *(worker_name(r) for r in range(N))}
    commands = runner.node_commands(spec, prep.files)
    assert not any("session" in a or "key" in a for _, args, _ in commands.values() for a in args)
    out = tmp_path / "run" / "raw"
    spawn = runner.spawn_plain(tb)
    with runner.launched(spawn, {h: ("tests.unit.keys_host", [str(out / f"{h}.got")],
                                     out / f"{h}.log") for h in prep.keys}, prep.keys) as procs:
        assert runner.wait(procs, time.monotonic() + 60) == ("ok", "")
    handed = keys.run_keys(prep.session, spec.pattern, N)
    for host in prep.keys:
        got = json.loads((out / f"{host}.got").read_text())
        assert got["session_id"] == prep.session.session_id
        assert got["keys"] == _digests(prep.session, handed[host].holds())
    assert len(json.loads((out / f"{PS_NAME}.got").read_text())["keys"]) == N
    assert all(len(json.loads((out / f"{worker_name(r)}.got").read_text())["keys"]) == 1
               for r in range(N))
    # No key of the run, nor its secret, in any file of the run folder, in bytes or in hex.
    blob = _everything_in(tmp_path / "run")
    every = [prep.session.secret] + [prep.session.pair_key(a, b) for a in [SERVER, *range(N)]
                                     for b in range(N) if a != b]
    assert not any(k in blob or k.hex().encode() in blob for k in every)


def test_the_fork_server_passes_the_pipe_on(tmp_path):
    """The client sends the read end with its request (SCM_RIGHTS); the server gets a copy it
    can read the host's keys from."""
    path = str(tmp_path / "z.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    got = {}

    def serve_one():
        conn, _ = listener.accept()
        with conn:
            request, fds = zygote._request(conn)
            got["request"], got["fds"] = request, len(fds)
            got["session"] = keys.read_fd(fds[0])
            conn.sendall((json.dumps({"pid": os.getpid()}) + "\n").encode())

    thread = threading.Thread(target=serve_one)
    thread.start()
    z = zygote.Zygote(tmp_path, _Ledger())
    z.sock_path = tmp_path / "z.sock"
    handed = keys.run_keys(Session.draw(), "ps", N)[worker_name(2)]
    proc = z.spawn(worker_name(2), os.getpid(), "harness.hosts.node", ["--run", "R"],
                   tmp_path / "w3.log", keys=keys.encode(handed))
    thread.join(10)
    listener.close()
    assert got["fds"] == 1 and got["session"] == handed and proc.pid == os.getpid()
    assert got["request"]["args"] == ["--run", "R"]   # the server adds --keys-fd for its child
    assert not any(str(handed.key(n).hex()) in json.dumps(got["request"]) for n in handed.holds())

