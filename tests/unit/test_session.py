"""The run's session: drawn per run, handed to the hosts in a file only its owner can read."""

import stat

import pytest

from harness.running.runfiles import RunFiles, read_session, write_session
from transports import registry
from transports.base import Session


def test_sessions_are_random_and_hide_their_key():
    a, b = Session.draw(), Session.draw()
    assert a != b and a.session_id != b.session_id and a.key != b.key
    assert len(a.key) == Session.KEY_BYTES
    assert a.key.hex() not in repr(a)


@pytest.mark.parametrize("bad", [dict(session_id=-1), dict(session_id=2**32),
                                 dict(key=b"short"), dict(key="not bytes" * 4)])
def test_a_malformed_session_is_refused(bad):
    good = dict(session_id=1, key=bytes(Session.KEY_BYTES))
    with pytest.raises(ValueError):
        Session(**{**good, **bad})


def test_session_file_round_trip_is_private(tmp_path):
    files = RunFiles(tmp_path)
    session = Session.draw()
    files.session.symlink_to(tmp_path / "elsewhere")   # left by a killed run: replaced, not followed
    write_session(files.session, session)
    assert stat.S_IMODE(files.session.stat().st_mode) == 0o600
    assert not (tmp_path / "elsewhere").exists()
    assert read_session(files.session) == session


def test_a_transport_shares_one_session_between_its_ends_unless_given_one():
    t = registry.create("tcp-cubic")
    assert t.session is t.session
    given = Session.draw()
    t.use_session(given)
    assert t.session is given
