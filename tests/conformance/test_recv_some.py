"""The PS's side of SSP, asynchronous training and faults, for every transport that has it, over
loopback: receive from whichever workers deliver first (``ServerEnd.recv_some``), each worker
at its own message id; a deadline returns what arrived and keeps the rest pending; sends to a
subset of workers, each with its own id (``ServerEnd.send_some``); and a worker whose process
is gone.

Transports without ``recv_some`` (the lab 3 plugin) are skipped: the PS then runs
bulk-synchronous training without faults only, through ``gather``.
"""

import threading
import time

import numpy as np
import pytest

from transports import registry
from transports.base import Layout, ServerEnd
from tests.conformance.loopback import on_free_ports

LAYOUT = Layout.from_sizes([("w1", 3000), ("b1", 40000), ("w2", 7)])
N = 3
IDS = {0: 7, 1: 3, 2: 5}   # every worker at its own message


# The built-in transports with a PS's ends; a plugin (lab 3's) may lack recv_some and then runs
# BSP only.
SLUGS = [s for s in registry.slugs() if registry.get(s).target.startswith("transports.")
         and registry.get(s).transport_class().PS]


def _bring_up(slug, ports):
    """A PS and N workers of ``slug`` on ``ports``, joined; what was opened is closed on failure."""
    ps_addr, addrs = ("127.0.0.1", ports[0]), [("127.0.0.1", p) for p in ports[1:]]
    transport = registry.create(slug, {})
    server = transport.serve(ps_addr, addrs, LAYOUT)
    workers = []
    try:
        for r in range(N):
            workers.append(transport.connect(r, addrs[r], ps_addr, LAYOUT))
        joins = [threading.Thread(target=w.join, args=(20.0,)) for w in workers]
        for t in joins:
            t.start()
        server.wait_for_workers(20.0)
        for t in joins:
            t.join()
    except BaseException:
        for w in workers:
            w.close()
        server.close()
        raise
    return server, workers, ps_addr, addrs, transport


@pytest.fixture(params=SLUGS)
def job(request):
    server, workers, ps_addr, addrs, transport = on_free_ports(
        N + 1, lambda ports: _bring_up(request.param, ports))
    try:
        yield request.param, server, workers, ps_addr, addrs, transport
    finally:
        for w in workers:
            w.close()
        server.close()


def _grad(rank):
    return np.full(LAYOUT.n_floats, rank + 1, dtype=np.float32)


def test_receive_from_any_then_the_rest(job):
    slug, server, workers, ps_addr, addrs, transport = job
    assert type(server).recv_some is not ServerEnd.recv_some, slug
    workers[1].push(IDS[1], _grad(1), 20.0)
    t0 = time.monotonic()
    got = server.recv_some(IDS, 1, 20.0)
    assert list(got) == [1] and time.monotonic() - t0 < 5.0
    np.testing.assert_array_equal(got[1].values, _grad(1))
    # Nothing more is coming: the deadline returns nothing, and is not an error.
    wanted = {0: IDS[0], 2: IDS[2]}
    t0 = time.monotonic()
    assert server.recv_some(wanted, 1, 0.2) == {}
    assert 0.15 < time.monotonic() - t0 < 3.0
    # Both deliver while nobody asks; a gather of all with a deadline takes them both.
    workers[0].push(IDS[0], _grad(0), 20.0)
    workers[2].push(IDS[2], _grad(2), 20.0)
    got = server.recv_some({**wanted, 1: IDS[1] + 1}, 3, 1.0)
    assert sorted(got) == [0, 2]
    np.testing.assert_array_equal(got[2].values, _grad(2))


def test_send_each_its_own_message(job):
    slug, server, workers, ps_addr, addrs, transport = job
    params = np.arange(LAYOUT.n_floats, dtype=np.float32)
    sent = server.send_some({0: 4, 2: 9}, params, 20.0)
    assert sorted(sent) == [0, 2] and sent[0].payload_bytes == LAYOUT.n_bytes
    np.testing.assert_array_equal(workers[0].pull(4, 20.0).values, params)
    np.testing.assert_array_equal(workers[2].pull(9, 20.0).values, params)


def test_a_closed_worker(job):
    slug, server, workers, ps_addr, addrs, transport = job
    workers[2].close()
    got = server.recv_some(IDS, 3, 1.0)
    assert got == {}
    if slug.startswith("tcp"):
        assert server.gone() == {2}   # TCP knows at once: the kernel ended the stream
    else:
        assert server.gone() == set()   # a datagram transport cannot tell dead from silent


def test_a_restarted_worker_is_heard_under_its_new_ids(job):
    """A worker process replaced by a new one (same rank, same address) joins again: the PS
    asks for either the old pending message or the new sequence's first id, and gets the latter
    (TCP: over a new connection it accepts). LTP's receive window (rx_msg_window) refuses a new
    sequence's ids, so its transports say REJOIN = False and runs refuse restart faults."""
    slug, server, workers, ps_addr, addrs, transport = job
    if not transport.REJOIN:
        pytest.skip(f"{slug}: a restarted worker cannot rejoin (its receive window)")
    workers[2].close()
    server.recv_some(IDS, 3, 0.3)   # notices what it can
    # A new process of the same run: a transport of its own, in the run's session.
    fresh = registry.create(slug, {})
    fresh.use_session(transport.session)
    new = fresh.connect(2, addrs[2], ps_addr, LAYOUT)
    workers[2] = new
    new.join(20.0)
    rejoin = 1 << 24
    new.push(rejoin, _grad(2), 20.0)
    got = server.recv_some({2: (IDS[2], rejoin)}, 1, 20.0)
    assert list(got) == [2] and got[2].stats["msg_id"] == rejoin
    assert 2 not in server.gone()
    sent = server.send_some({2: rejoin + 1}, _grad(0), 20.0)
    assert list(sent) == [2]
    np.testing.assert_array_equal(new.pull(rejoin + 1, 20.0).values, _grad(0))


def test_every_worker_at_once_for_many_iterations(job):
    """All workers push the same id at once and the PS takes whichever closes first, iteration
    after iteration: nothing a worker delivered is left behind. (PLOT's layers are one message id
    in several segments, taken one by one as each closes; a layer opening after another of its id
    was taken was once refused as stale, and its worker went missing.)"""
    slug, server, workers, ps_addr, addrs, transport = job
    for it in range(10, 22):
        pushes = [threading.Thread(target=w.push, args=(it, _grad(r), 20.0))
                  for r, w in enumerate(workers)]
        for t in pushes:
            t.start()
        got = server.recv_some({r: it for r in range(N)}, N, 10.0)
        for t in pushes:
            t.join()
        assert sorted(got) == list(range(N)), f"iteration {it}: took {sorted(got)}"
        for r in range(N):
            np.testing.assert_array_equal(got[r].values, _grad(r))
