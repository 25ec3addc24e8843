"""A run's session: its id, and the secret keys of its pairs of hosts.

The harness draws one :class:`Session` per run (:meth:`Session.draw`: a random 32-bit session id
and a 32-byte secret). The secret never leaves the process that drew it: every key a transport
uses is derived from it by name (:meth:`Session.key`: BLAKE2b keyed with the secret, personalised
``ltp-run-key``, over the name, 32 bytes out), and each host is handed only the keys its own
pairs need (:meth:`Session.handover`; the runner does it through a pipe,
:mod:`harness.running.keys`). Keys are named:

- ``pair:A-B`` (:meth:`Session.pair_key`): the key two *parties* share, A < B. A party is the
  number a host goes by in its run: worker (or peer, or member) ``r`` is ``r``, and the
  parameter server of the ``ps`` pattern is :data:`SERVER` (0xFFFF, LTP's wire rank for it; in a
  collective the PS's host is member ``N``, as :mod:`harness.hosts.collective` numbers it). LTP
  keys the MAC of every datagram between two parties with their pair's key, so a host can forge
  the datagrams of no pair it is not part of.
- ``sender:S`` (:meth:`Session.sender_key`): peer ``S``'s key in the multicast peer transport,
  whose one tag per datagram every receiver checks (:mod:`transports.peer.auth`), so every peer
  of a run is handed every sender's key.

A session that holds the secret (the runner's, or one a transport drew for itself because every
end it opens lives in one process: a loopback test or benchmark) derives any key; a handed-over
one holds its keys and nothing else, and asking it for another raises :class:`KeyMissing`.
``repr`` shows no key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Iterable, Mapping

SERVER = 0xFFFF
"""The parameter server's party number in the ``ps`` pattern (LTP's ``LTP_RANK_SERVER``)."""

_PERSON = b"ltp-run-key"   # BLAKE2b personalisation of every derived key


class KeyMissing(LookupError):
    """A host asked its session for a key it was not handed."""


def pair_name(a: int, b: int) -> str:
    """The name of the key parties ``a`` and ``b`` share (the same both ways round)."""
    for p in (a, b):
        if not (isinstance(p, int) and 0 <= p <= SERVER):
            raise ValueError(f"a party is a number from 0 to {SERVER}, not {p!r}.")
    if a == b:
        raise ValueError(f"a pair is two parties, not {a} twice.")
    return f"pair:{min(a, b)}-{max(a, b)}"


def sender_name(s: int) -> str:
    """The name of sender ``s``'s key (the multicast peer transport's)."""
    if not (isinstance(s, int) and 0 <= s < SERVER):
        raise ValueError(f"a sender is a number from 0 to {SERVER - 1}, not {s!r}.")
    return f"sender:{s}"


@dataclasses.dataclass(frozen=True)
class Session:
    """What the hosts of one run share and nobody on the network should learn: a random session
    id (datagrams of another run are refused) and keys, derived from the run's ``secret`` or
    handed over one by one (``keys``, by name). See the module docstring."""

    session_id: int
    secret: bytes | None = dataclasses.field(default=None, repr=False)
    keys: Mapping[str, bytes] = dataclasses.field(default_factory=dict, repr=False, hash=False)

    KEY_BYTES = 32   # the secret and every key; a transport takes what its MAC needs (LTP: 16)

    def __post_init__(self) -> None:
        if not (isinstance(self.session_id, int) and 0 <= self.session_id < 2**32):
            raise ValueError(f"a session id is a 32-bit unsigned number, not {self.session_id!r}.")
        if self.secret is not None and (not isinstance(self.secret, bytes)
                                        or len(self.secret) != self.KEY_BYTES):
            raise ValueError(f"a session secret is {self.KEY_BYTES} bytes.")
        for name, key in self.keys.items():
            if not (isinstance(name, str) and isinstance(key, bytes)
                    and len(key) == self.KEY_BYTES):
                raise ValueError(f"a session key is named and {self.KEY_BYTES} bytes long.")
        object.__setattr__(self, "keys", dict(self.keys))

    @classmethod
    def draw(cls) -> Session:
        """A fresh session from the operating system's secure random source."""
        return cls(secrets.randbits(32), secrets.token_bytes(cls.KEY_BYTES))

    def key(self, name: str) -> bytes:
        """The key called ``name``: handed over, or derived from the secret."""
        if name in self.keys:
            return self.keys[name]
        if self.secret is None:
            raise KeyMissing(f"this host holds no key {name!r}: the runner hands each host only "
                             "the keys of its own pairs.")
        return hashlib.blake2b(name.encode(), key=self.secret, digest_size=self.KEY_BYTES,
                               person=_PERSON).digest()

    def pair_key(self, a: int, b: int) -> bytes:
        """The key parties ``a`` and ``b`` share."""
        return self.key(pair_name(a, b))

    def sender_key(self, s: int) -> bytes:
        """Sender ``s``'s key (the multicast peer transport's)."""
        return self.key(sender_name(s))

    def handover(self, names: Iterable[str]) -> Session:
        """The session one host is given: this id and the keys called ``names``, no secret."""
        return Session(self.session_id, None, {name: self.key(name) for name in names})

    def holds(self) -> tuple[str, ...]:
        """The names of the keys handed to this session, sorted (none for a drawn one)."""
        return tuple(sorted(self.keys))
