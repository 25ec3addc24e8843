"""The run's session: drawn per run; keys derived per pair of parties, handed over one host at a
time (transports/session.py)."""

import pytest

from transports import registry
from transports.base import SERVER, KeyMissing, Session
from transports.session import pair_name


def test_sessions_are_random_and_hide_their_keys():
    a, b = Session.draw(), Session.draw()
    assert a != b and a.session_id != b.session_id and a.secret != b.secret
    assert len(a.secret) == Session.KEY_BYTES
    handed = a.handover([pair_name(0, SERVER)])
    for s in (a, handed):
        assert a.secret.hex() not in repr(s) and a.pair_key(0, SERVER).hex() not in repr(s)


@pytest.mark.parametrize("bad", [dict(session_id=-1), dict(session_id=2**32),
                                 dict(secret=b"short"), dict(secret="not bytes" * 4),
                                 dict(keys={"pair:0-1": b"short"}), dict(keys={1: bytes(32)})])
def test_a_malformed_session_is_refused(bad):
    good = dict(session_id=1, secret=bytes(Session.KEY_BYTES))
    with pytest.raises(ValueError):
        Session(**{**good, **bad})


def test_pair_keys_are_one_per_pair_and_the_same_both_ways():
    s = Session.draw()
    assert s.pair_key(0, SERVER) == s.pair_key(SERVER, 0) and len(s.pair_key(0, 1)) == 32
    keys = {s.pair_key(a, b) for a, b in [(0, SERVER), (1, SERVER), (0, 1), (0, 2), (1, 2)]}
    assert len(keys) == 5
    assert s.sender_key(0) not in keys and s.sender_key(0) != s.sender_key(1)
    assert Session(s.session_id, s.secret).pair_key(0, 1) == s.pair_key(0, 1)   # derived, not drawn
    assert Session(s.session_id, Session.draw().secret).pair_key(0, 1) != s.pair_key(0, 1)
    for a, b in [(0, 0), (-1, 0), (0, SERVER + 1), (0.5, 1)]:
        with pytest.raises(ValueError):
            s.pair_key(a, b)


def test_a_handed_over_session_holds_its_keys_and_nothing_else():
    s = Session.draw()
    worker = s.handover([pair_name(3, SERVER)])
    assert worker.secret is None and worker.session_id == s.session_id
    assert worker.holds() == (pair_name(3, SERVER),)
    assert worker.pair_key(SERVER, 3) == s.pair_key(3, SERVER)
    for other in [(2, SERVER), (3, 4)]:
        with pytest.raises(KeyMissing, match="only the keys of its own pairs"):
            worker.pair_key(*other)
    with pytest.raises(KeyMissing):
        worker.sender_key(3)


def test_a_transport_shares_one_session_between_its_ends_unless_given_one():
    t = registry.create("tcp-cubic")
    assert t.session is t.session and t.session.secret is not None   # one process: every key
    given = Session.draw().handover([pair_name(0, SERVER)])
    t.use_session(given)
    assert t.session is given
