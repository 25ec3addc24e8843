"""Two traps of datagrams and loss, for every registered datagram transport (lab 3's too).

Both once made the lab 3 solution wait out its whole timeout at 5 % loss:

1. **The lost answer.** The PS's answer to a worker's hello is lost while the PS has already
   started: the worker's ``join`` must keep the parameters that arrive in its place (or ask
   again), not wait for an answer that will not come.
2. **The message left behind.** Every datagram of a worker's gradient is lost and the worker
   moves on to its next one: the PS must end the old message once the new one shows the sender
   has left it, not wait for it until its timeout.

Each trap runs one PS and one worker over :class:`~tests.conformance.relay.Relay`, which drops
exactly the datagrams the trap names, whatever the wire format. Run them on your own transport
(lab 3) with ``LTP_TRANSPORTS=my_transport.py .venv/bin/pytest tests/conformance/test_traps.py
-k my-udp``. TCP's schemes are left out: the kernel repairs both for them.

**The native core's schemes** (``ltp``, ``plot``, ``mlt``, ``phase-bound`` and the others built
on :class:`~transports.ltp.LtpTransport`) once fell into trap 2: when none of a message's
datagrams reached the PS, the PS had no receive context for it and waited for its deadline. Since
wire version 5 every DATA says how many older messages are still open at its sender
(``open_back``), so the PS takes a message its sender finished with as an empty one at once
(docs/ltp-protocol.md, "A message left behind").
"""

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from transports import registry
from transports.base import Layout
from tests.conformance.loopback import on_free_ports
from tests.conformance.relay import TO_PS, TO_WORKER, Relay

PROJECT = Path(__file__).resolve().parents[2]
SOLUTION = PROJECT / "docs" / "labs" / "instructor" / "udp_blast.py"
STARTER = PROJECT / "docs" / "labs" / "code" / "my_transport.py"
registry.load_plugins(str(SOLUTION))
LAYOUT = Layout.from_sizes([("w", 1000), ("b", 30000)])
PROMPT_S = 5.0        # what "at once" allows; the traps' timeouts are longer
TIMEOUT_S = 12.0


def datagram_slugs() -> list[str]:
    """Registered schemes with a PS whose ends talk in datagrams (not the TCP family)."""
    out = []
    for slug in registry.slugs():
        info = registry.get(slug)
        if info.target.startswith("transports.tcp") or not info.transport_class().PS:
            continue
        out.append(slug)
    return out


def _pair(slug: str, relay_rule, body) -> None:
    """Start a PS and one worker of ``slug`` through a relay dropping by ``relay_rule``; run
    ``body(ps, worker, relay)``; close everything."""
    def job(ports):
        ps_addr = ("127.0.0.1", ports[0])
        transport = registry.create(slug, {})
        with Relay(ps_addr, relay_rule) as relay:
            ps = transport.serve(ps_addr, [relay.ps_side], LAYOUT)
            worker = None
            try:
                joined = threading.Thread(target=ps.wait_for_workers, args=(TIMEOUT_S,))
                joined.start()
                worker = transport.connect(0, ("127.0.0.1", ports[1]), relay.worker_side, LAYOUT)
                body(ps, worker, relay, joined)
            finally:
                if worker is not None:
                    worker.close()
                ps.close()
    on_free_ports(2, job)


def trap_lost_answer(slug: str) -> None:
    """Trap 1: the first datagram toward the worker (the answer to its hello) is dropped."""
    params = np.arange(LAYOUT.n_floats, dtype=np.float32)

    def body(ps, worker, relay, joined):
        joiner = threading.Thread(target=worker.join, args=(TIMEOUT_S,))
        joiner.start()
        joined.join(TIMEOUT_S)
        sender = threading.Thread(target=ps.broadcast, args=(0, params, TIMEOUT_S))
        sender.start()
        t0 = time.monotonic()
        joiner.join(TIMEOUT_S)
        got = worker.pull(0, TIMEOUT_S)
        sender.join(TIMEOUT_S)
        assert relay.dropped[TO_WORKER] == 1, relay.dropped
        assert time.monotonic() - t0 < PROMPT_S, "join waited for the lost answer"
        assert got.received_frac == 1.0
        np.testing.assert_array_equal(got.values, params)

    _pair(slug, lambda direction, n: direction == TO_WORKER and n == 0, body)


def trap_left_behind(slug: str) -> None:
    """Trap 2: every datagram of the worker's message 0 is dropped; it pushes message 1."""
    blackhole = {"on": False}
    grads = [np.full(LAYOUT.n_floats, k + 1, np.float32) for k in range(2)]

    def body(ps, worker, relay, joined):
        worker.join(TIMEOUT_S)
        joined.join(TIMEOUT_S)
        gathered = {}
        gatherer = threading.Thread(
            target=lambda: gathered.update({0: ps.gather(0, TIMEOUT_S),
                                            1: ps.gather(1, TIMEOUT_S)}))
        blackhole["on"] = True
        gatherer.start()
        try:
            worker.push(0, grads[0], 1.0)
        except Exception:   # a transport may give up on a message nobody acknowledges
            pass
        relay.settle()
        blackhole["on"] = False
        t0 = time.monotonic()
        worker.push(1, grads[1], TIMEOUT_S)
        gatherer.join(TIMEOUT_S)
        assert relay.dropped[TO_PS] > 0
        assert set(gathered) == {0, 1}, "the PS is still waiting for the message left behind"
        assert time.monotonic() - t0 < PROMPT_S, "the PS waited for the message left behind"
        [late], [current] = gathered[0], gathered[1]
        assert late.received_frac < 1.0 or np.array_equal(late.values, grads[0])
        assert current.received_frac == 1.0
        np.testing.assert_array_equal(current.values, grads[1])

    _pair(slug, lambda direction, n: direction == TO_PS and blackhole["on"], body)


@pytest.mark.parametrize("slug", datagram_slugs())
def test_a_lost_hello_answer_does_not_stall_join(slug):
    trap_lost_answer(slug)


@pytest.mark.parametrize("slug", datagram_slugs())
def test_a_message_left_behind_ends_at_once(slug):
    trap_left_behind(slug)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_lab3_starter_falls_into_both_traps():
    """The starter (its TODOs open) fails the traps the solution passes: the traps test the
    student's transport, not the solution's internals."""
    if os.environ.get(registry.PLUGINS_ENV, "").endswith("my_transport.py"):
        pytest.skip("the student's own transport is loaded: test it by its slug")
    registry.load_plugins(str(STARTER))
    try:
        for trap in (trap_lost_answer, trap_left_behind):
            with pytest.raises(NotImplementedError):
                trap("my-udp")
    finally:   # the tests after this one see the registry as it was
        registry.REGISTRY.pop("my-udp", None)
