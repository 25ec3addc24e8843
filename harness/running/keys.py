"""Which keys each host of a run gets, and how they reach it: a pipe it inherits, never a file.

The runner draws a run's :class:`~transports.session.Session` (its id and a secret that stays in
the runner) and hands every host process only the keys of the pairs it takes part in
(:func:`run_keys`; the parties are numbered as :mod:`transports.session` says):

- ``ps`` pattern: the PS gets the key of (PS, worker r) for every r; worker r gets (r, PS) only;
- ``tree`` and ``ring``: every member (workers 0 .. N-1, the PS's host N) may talk to any other,
  so each gets the key of every pair it is part of, N keys;
- peer-to-peer runs (:func:`peer_keys`): peer r gets the keys of its pairs (r, s), and every
  sender's key of the multicast transport, whose one tag per datagram every receiver checks
  (:mod:`transports.peer.auth` says what that leaves open).

A host's keys travel as one small JSON document (:func:`encode`: the session id and its keys by
name, hex) written into a pipe whose write end the runner closes before the host starts; the host
inherits the read end and is told its number (``--keys-fd N``), reads it to the end and closes it
(:func:`read_fd`). Both launchers pass it: ``mnexec`` keeps the descriptor through ``pass_fds``,
and the fork server (:mod:`harness.hosts.zygote`) receives it over its Unix socket
(``SCM_RIGHTS``) and leaves it open in the child it forks. Nothing is written to the run folder,
so no key outlives the run, and no other process (another host, any root process in any
namespace) can read a host's keys from a file; a root process could still read another process's
memory, which no handover prevents.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Mapping, Sequence

from topologies.incast import PS_NAME, worker_name
from transports.session import SERVER, Session, pair_name, sender_name

FLAG = "--keys-fd"
"""The command-line flag that names the inherited descriptor."""

_F_SETPIPE_SZ = 1031   # fcntl.F_SETPIPE_SZ (Linux), absent from older Pythons' fcntl
_PIPE_DEFAULT_BYTES = 65536


def run_keys(session: Session, pattern: str, n_workers: int) -> dict[str, Session]:
    """What each host of a PS-kind run (``ps``, ``tree``, ``ring``) is handed, by host name."""
    from harness.hosts.pattern import parse_pattern

    if parse_pattern(pattern).kind == "ps":
        out = {PS_NAME: session.handover(pair_name(SERVER, r) for r in range(n_workers))}
        out.update({worker_name(r): session.handover([pair_name(r, SERVER)])
                    for r in range(n_workers)})
        return out
    members = n_workers + 1   # the workers, then the PS's host (harness.hosts.collective)
    hosts = [worker_name(m) for m in range(n_workers)] + [PS_NAME]
    return {host: session.handover(pair_name(m, o) for o in range(members) if o != m)
            for m, host in enumerate(hosts)}


def peer_keys(session: Session, n_peers: int) -> dict[str, Session]:
    """What each peer of a peer-to-peer run is handed, by host name."""
    senders = [sender_name(s) for s in range(n_peers)]
    return {worker_name(r): session.handover(
        [pair_name(r, s) for s in range(n_peers) if s != r] + senders) for r in range(n_peers)}


def encode(session: Session) -> bytes:
    """One host's handover: its session id and keys (a session holding the secret is refused:
    the secret stays with the runner)."""
    if session.secret is not None:
        raise ValueError("a run's secret is never handed to a host; hand over its keys "
                         "(Session.handover).")
    return json.dumps({"session_id": session.session_id,
                       "keys": {name: session.key(name).hex() for name in session.holds()}}
                      ).encode()


def decode(blob: bytes) -> Session:
    """The session :func:`encode` wrote."""
    data = json.loads(blob)
    return Session(int(data["session_id"]), None,
                   {name: bytes.fromhex(key) for name, key in data["keys"].items()})


def pipe_fd(blob: bytes) -> int:
    """A pipe holding ``blob``, its write end closed: the read end, inheritable. The caller
    passes it to one child and closes its own copy once the child has it."""
    r, w = os.pipe()
    try:
        if len(blob) > _PIPE_DEFAULT_BYTES:
            fcntl.fcntl(w, _F_SETPIPE_SZ, len(blob))   # all of it fits before anyone reads
        view = memoryview(blob)
        while view:
            view = view[os.write(w, view):]
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    os.set_inheritable(r, True)
    return r


def read_fd(fd: int) -> Session:
    """Read a handover from inherited descriptor ``fd`` to its end, close it, decode it."""
    chunks = []
    with os.fdopen(fd, "rb", closefd=True) as f:
        while chunk := f.read(65536):
            chunks.append(chunk)
    return decode(b"".join(chunks))


def popen(argv: Sequence[str], blob: bytes | None, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv + [FLAG, N], pass_fds=(N,), **kwargs)`` with ``blob`` in pipe
    ``N`` (without a blob, a plain Popen): how a process started outside the launchers (a
    loopback test) gets its keys."""
    if blob is None:
        return subprocess.Popen(list(argv), **kwargs)
    fd = pipe_fd(blob)
    try:
        return subprocess.Popen(list(argv) + [FLAG, str(fd)], pass_fds=(fd,), **kwargs)
    finally:
        os.close(fd)


def blobs(sessions: Mapping[str, Session]) -> dict[str, bytes]:
    """:func:`encode` of every host's session."""
    return {host: encode(s) for host, s in sessions.items()}
