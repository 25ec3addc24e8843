"""The contract every gradient transport implements.

One parameter-server job has one :class:`ServerEnd` (on the PS) and one :class:`WorkerEnd` per
worker. Each iteration every worker calls :meth:`WorkerEnd.push` with its flat float32 gradient,
the PS calls :meth:`ServerEnd.gather` to collect one message per worker, lets the transport learn
from them with :meth:`ServerEnd.observe`, averages them with :meth:`ServerEnd.average`, and calls
:meth:`ServerEnd.broadcast` with the new parameters, which the workers receive with
:meth:`WorkerEnd.pull`.

The two directions may carry different shapes: parameters go down in the model's
:class:`Layout`, pushes come up in the ``up`` layout given to :meth:`Transport.serve` and
:meth:`Transport.connect` (by default the same; shorter when workers compress).

Partial delivery is a first-class result: every received message is a :class:`Delivery` whose
``mask`` says which coordinates arrived (``None`` means all of them) and whose ``received_frac`` is
the fraction that did. A reliable transport (TCP) always returns ``received_frac == 1.0``; a
loss-tolerant one (LTP, PLOT) may close a message early and repair the missing spans with a
Bubble Filling strategy, and says exactly what it filled.

A transport is created from its registry slug and a mapping of options
(:func:`transports.registry.create`); it never reads the run spec itself, so the harness does not
change when a new transport is added. What the hosts of one run share besides the options is a
:class:`~transports.session.Session` (a random session id, and keys per pair of hosts), which the
harness draws per run and hands to every host outside the emulated network, each only the keys of
its own pairs (:meth:`Transport.use_session`). Each transport declares
its options once, as a table of :class:`Option` rows that validation, ``invoke transports`` and the
generated docs all read. See ``docs/adding-a-transport.md``.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.session import SERVER, KeyMissing, Session  # noqa: F401  (re-exported)

Addr = tuple[str, int]
"""An (IPv4 address, port) pair."""


class UserError(Exception):
    """An error a user can cause (a bad parameter, a missing build, not root, a busy machine):
    the command line prints its one sentence and no traceback. Every package's such errors
    derive from it; it lives here, in the lowest layer, so that all of them can."""


class TransportError(UserError):
    """A transport failed in a way the run cannot recover from."""


class TransportTimeout(TransportError):
    """A peer did not answer within the allowed time."""


class OptionError(UserError, ValueError):
    """A transport option is unknown or out of range."""


def check_order(owner: str, options: Mapping[str, Any], low: str, high: str,
                why: str = "") -> None:
    """:class:`OptionError` (one sentence, ``why`` after a colon) if option ``low`` exceeds
    option ``high``."""
    if options[low] > options[high]:
        raise OptionError(f"{owner} {low} ({options[low]:g}) must not exceed {high} "
                          f"({options[high]:g})" + (f": {why}." if why else "."))


def parse_scheme(text: str, what: str = "transport") -> tuple[str, dict[str, Any]]:
    """``"ltp+filler=zero+cc=false"`` -> ``("ltp", {"filler": "zero", "cc": False})``.

    A scheme is a transport slug with options; each value is read as JSON when it parses
    (numbers, true/false, null, lists) and as a string otherwise. The one parser of the notation,
    for the PS's transports and the peers' (``what`` names them in the error).
    """
    slug, *pairs = text.strip().split("+")
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OptionError(f"{text!r}: write {what} options as slug+name=value, not {pair!r}.")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return slug, options


def check_options(table: Sequence[Option], given: Mapping[str, Any] | None, owner: str, *,
                  what: str = "transport", label: str = "") -> dict[str, Any]:
    """The effective options of ``owner`` (a ``what``: transport or peer transport): defaults
    from ``table`` merged with ``given``, each value checked by its row (errors name ``label``,
    else ``owner``). Raises :class:`OptionError` with one sentence on an unknown name or a bad
    value."""
    rows = {o.name: o for o in table}
    given = dict(given or {})
    unknown = sorted(set(given) - set(rows))
    if unknown:
        raise OptionError(f"{what} {owner!r} has no option {unknown[0]!r}; its options are: "
                          f"{', '.join(sorted(rows)) or 'none'}.")
    options = {**{n: o.default for n, o in rows.items()}, **given}
    for name, row in rows.items():
        row.check(options[name], label or owner)
    return options


def scheme_name(transport: str, options: dict[str, Any]) -> str:
    """The inverse of :func:`parse_scheme`."""
    return "+".join([transport] + [f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                                   for k, v in sorted(options.items())])


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _num(x: float) -> str:
    """A bound as a person writes it: 60000000, not 6e+07 or 60000000.0."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a transport: its name, default, type, allowed values, unit and one line of
    help.

    ``kind`` is ``"int"`` (an integral number), ``"float"``, ``"bool"``, ``"choice"`` (one of
    ``choices``), ``"names"`` (a list of strings) or ``"any"`` (checked by the transport's
    ``validate``; ``values`` then says what it takes). ``low`` and ``high`` bound numbers,
    inclusive; ``nullable`` also accepts None. ``native`` names the C field the option sets, if any.
    """

    name: str
    default: Any
    kind: str = "any"
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    unit: str = ""
    help: str = ""
    nullable: bool = False
    values: str = ""
    native: str = ""

    def check(self, value: Any, owner: str) -> None:
        """Raise :class:`OptionError` with one sentence if ``value`` is not allowed."""
        if value is None and self.nullable:
            return
        ok = {
            "int": lambda v: _is_number(v) and float(v).is_integer() and self._in_range(v),
            "float": lambda v: _is_number(v) and self._in_range(v),
            "bool": lambda v: isinstance(v, bool),
            "choice": lambda v: isinstance(v, str) and v in self.choices,
            "names": lambda v: (isinstance(v, (list, tuple))
                                and all(isinstance(x, str) for x in v)),
            "any": lambda v: True,
        }[self.kind]
        if not ok(value):
            raise OptionError(f"{owner} option {self.name} must be {self.describe()}, "
                              f"not {value!r}.")

    def _in_range(self, v: Any) -> bool:
        return ((self.low is None or v >= self.low) and (self.high is None or v <= self.high))

    def describe(self) -> str:
        """What the option takes, as the end of "must be ..." (also the docs' values column)."""
        if self.values:
            text = self.values
        elif self.kind in ("int", "float"):
            text = "an integer" if self.kind == "int" else "a number"
            if self.low is not None and self.high is not None:
                text += f" from {_num(self.low)} to {_num(self.high)}"
            elif self.low is not None:
                text += f" of at least {_num(self.low)}"
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = "one of " + ", ".join(self.choices)
        elif self.kind == "names":
            text = "a list of names such as ['fc2.bias']"
        else:
            text = "any value"
        return text + (" (or null)" if self.nullable else "")


class _DefaultsFromTable:
    """``Transport.DEFAULTS``: every option with its default, read from the option table."""

    def __get__(self, obj: object, owner: type[Transport]) -> dict[str, Any]:
        return {o.name: o.default for o in owner.option_table()}


@dataclasses.dataclass(frozen=True)
class PriorityBands:
    """A bottleneck queue of strict priority bands, what a transport that marks its datagrams
    asks of the switch (:meth:`Transport.bottleneck_queue`).

    Band ``k`` (0 is served first) takes the packets whose DSCP is ``dscp[k]``; anything else
    goes to the last band. ``shares`` divide the queue's buffer (the run's ``queue_pkts``) among
    the bands; a full band drops its oldest packet when ``head_drop``, else the arriving one.
    """

    dscp: tuple[int, ...]
    shares: tuple[float, ...]
    head_drop: bool = True


@dataclasses.dataclass(frozen=True)
class Segment:
    """A named span of the flat parameter vector (one tensor of the model)."""

    name: str
    offset: int
    length: int


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the model's tensors lie in the flat float32 vector that transports carry."""

    segments: tuple[Segment, ...]

    @property
    def n_floats(self) -> int:
        """Total number of float32 values in one message."""
        return sum(s.length for s in self.segments)

    @property
    def n_bytes(self) -> int:
        """Payload size of one message in bytes."""
        return 4 * self.n_floats

    @classmethod
    def single(cls, n_floats: int) -> Layout:
        """A layout with one segment, for tests and benchmarks that send plain vectors."""
        return cls((Segment("all", 0, n_floats),))

    @classmethod
    def from_sizes(cls, sizes: Sequence[tuple[str, int]]) -> Layout:
        """Lay out named tensors of the given sizes back to back."""
        segments, offset = [], 0
        for name, length in sizes:
            segments.append(Segment(name, offset, int(length)))
            offset += int(length)
        return cls(tuple(segments))


@dataclasses.dataclass
class Delivery:
    """One message as the receiver got it.

    ``values`` is always a full-length float32 vector; where ``mask`` is False the values were
    not received and hold whatever the transport's filler put there. ``segment_fracs`` gives the
    received fraction per layout segment. ``stats`` holds per-message transport counters (packets,
    retransmissions, early close, ...), all numbers.
    """

    values: np.ndarray
    mask: np.ndarray | None
    received_frac: float
    segment_fracs: tuple[float, ...]
    stats: dict[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def whole(cls, values: np.ndarray, layout: Layout, **stats: float) -> Delivery:
        """A message that arrived completely."""
        return cls(values, None, 1.0, tuple(1.0 for _ in layout.segments), dict(stats))


@dataclasses.dataclass
class SendReport:
    """What sending one message cost the sender."""

    payload_bytes: int
    wire_bytes: int
    packets: int = 0
    retransmits: int = 0
    stats: dict[str, float] = dataclasses.field(default_factory=dict)


class End(abc.ABC):
    """What every end of a job has, whichever its role: counters, refusals, closing; a context
    manager that closes it."""

    def stats(self) -> dict[str, float | str]:
        """Cumulative counters of this end (numbers) and settings in effect (strings)."""
        return {}

    def rejections(self) -> dict[str, float]:
        """The counters of :meth:`stats` that count datagrams this end refused as not from its
        run's peers or not what it expects (forged, corrupt, stray), by name; none by default."""
        return {}

    @abc.abstractmethod
    def close(self) -> None:
        """Release sockets and native state. Safe to call twice."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ServerEnd(End):
    """The parameter server's end of a job: gathers gradients, broadcasts parameters."""

    @abc.abstractmethod
    def wait_for_workers(self, timeout_s: float) -> None:
        """Block until every worker has joined, or raise :class:`TransportTimeout`."""

    @abc.abstractmethod
    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        """Receive message ``msg_id`` from every worker; one :class:`Delivery` per worker, by rank."""

    @abc.abstractmethod
    def broadcast(self, msg_id: int, values: np.ndarray, timeout_s: float) -> list[SendReport]:
        """Send ``values`` as message ``msg_id`` to every worker; one report per worker, by rank."""

    def recv_some(self, wanted: Mapping[int, int], min_count: int,
                  timeout_s: float) -> dict[int, Delivery]:
        """Receive message ``wanted[rank]`` from each worker named in ``wanted``, whichever
        deliver first. ``wanted[rank]`` may also be a tuple of message ids: whichever of them
        arrives (a worker that may have been restarted answers with a new sequence); the
        Delivery's ``stats["msg_id"]`` says which.

        Returns once ``min_count`` of them have arrived, or at the deadline, with every one that
        has arrived by then, by rank: perhaps fewer than ``min_count``, perhaps none (the deadline
        is not an error here). A message not returned stays pending: asking for it again later
        gets it, what had arrived of it included. Each worker has its own sequence of message
        ids, so the PS can wait for workers that are at different iterations (SSP, asynchronous
        training, a worker coming back). A worker whose connection the transport knows is gone
        is in :meth:`gone` instead.

        The default serves a transport that only has :meth:`gather`: every worker, one message
        id, all of them (bulk-synchronous training without faults).
        """
        ids = set(wanted.values())
        if len(ids) != 1 or min_count != len(wanted) or isinstance(next(iter(ids)), tuple):
            raise TransportError(f"{type(self).__name__} can only gather one message from every "
                                 "worker; it has no recv_some for SSP, asynchronous training or "
                                 "faults.")
        got = self.gather(ids.pop(), timeout_s)
        if len(got) != len(wanted):
            raise TransportError(f"{type(self).__name__} can only gather from every worker.")
        return {rank: got[rank] for rank in wanted}

    def send_some(self, messages: Mapping[int, int], values: np.ndarray,
                  timeout_s: float) -> dict[int, SendReport]:
        """Send ``values`` to each worker named in ``messages`` as its message ``messages[rank]``.

        Returns the reports of the sends that finished by the deadline, by rank. One that did not
        finish is either still going (a byte stream cannot take back half a message: TCP finishes
        it in later calls) or suspended (LTP: it resumes where it stopped when sent again); either
        way, calling again with the same message id later delivers it, and is cheap. The default serves a transport
        that only has :meth:`broadcast`: every worker, one message id.
        """
        ids = set(messages.values())
        if len(ids) != 1:
            raise TransportError(f"{type(self).__name__} can only broadcast one message to every "
                                 "worker; it has no send_some.")
        sent = self.broadcast(ids.pop(), values, timeout_s)
        if len(sent) != len(messages):
            raise TransportError(f"{type(self).__name__} can only broadcast to every worker.")
        return {rank: sent[rank] for rank in messages}

    def gone(self) -> set[int]:
        """Ranks whose connection the transport knows is gone (a TCP reset or end of stream).

        A datagram transport cannot know: a dead worker and a silent one look the same, so it
        returns an empty set and the PS's deadline decides.
        """
        return set()

    def observe(self, msg_id: int, deliveries: Sequence[Delivery]) -> None:
        """Learn from one gathered message; the harness calls it right after :meth:`gather`.

        A transport that adapts to what it receives (PLOT's SNR profiling) does it here, so
        :meth:`average` stays free of side effects. The default does nothing.
        """

    def average(self, deliveries: Sequence[Delivery]) -> np.ndarray:
        """Average the workers' messages coordinate by coordinate (filled values included)."""
        return np.mean([d.values for d in deliveries], axis=0, dtype=np.float32)



class WorkerEnd(End):
    """A worker's end of a job: pushes gradients, pulls parameters."""

    @abc.abstractmethod
    def join(self, timeout_s: float) -> None:
        """Reach the server and register, or raise :class:`TransportTimeout`."""

    @abc.abstractmethod
    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        """Send this worker's message ``msg_id`` to the server."""

    @abc.abstractmethod
    def pull(self, msg_id: int, timeout_s: float) -> Delivery:
        """Receive the server's message ``msg_id``."""



class Transport(abc.ABC):
    """A factory for the two ends of a job, configured by options.

    Subclasses declare ``OPTIONS``, one :class:`Option` per option (or override
    :meth:`option_table` when the table is read from elsewhere, as LTP reads C's). Unknown options
    are rejected, each value is checked against its row, then :meth:`validate` checks the rules
    that tie options together; :meth:`options` returns the effective set so the results can
    record exactly what ran. ``DEFAULTS`` is every option with its default. (A subclass that
    still declares a plain ``DEFAULTS`` dict gets untyped rows.)
    """

    LABEL = ""                       # how messages name the transport ("LTP"); default: the slug
    # A restarted worker process can rejoin a running job (ServerEnd.recv_some with a new
    # generation's ids): TCP takes its new connection; LTP's receive window refuses its ids.
    REJOIN = False
    # It opens an end for collectives (:meth:`mesh`): trees and rings run over it.
    MESH = False
    # It opens the ps pattern's two ends (:meth:`serve`, :meth:`connect`); an all-reduce only
    # scheme (OptiReduce) does not, and its ps runs are refused before they start.
    PS = True
    OPTIONS: Sequence[Option] = ()
    DEFAULTS = _DefaultsFromTable()

    def __init__(self, slug: str, options: Mapping[str, Any] | None = None) -> None:
        self.slug = slug
        self._options = check_options(self.option_table(), options, slug,
                                      label=self.LABEL or slug)
        self._session: Session | None = None
        self.validate()

    @classmethod
    def option_table(cls) -> tuple[Option, ...]:
        """Every option of this transport, in a stable order."""
        if cls.OPTIONS:
            return tuple(cls.OPTIONS)
        legacy = inspect.getattr_static(cls, "DEFAULTS")
        if isinstance(legacy, Mapping):
            return tuple(Option(name, value) for name, value in legacy.items())
        return ()

    def validate(self) -> None:
        """Check rules that tie options together; raise :class:`OptionError` with a sentence.

        Each option's own type and range are already checked against its :class:`Option` row.
        """

    def options(self) -> dict[str, Any]:
        """The effective options (defaults merged with what was given)."""
        return dict(self._options)

    def use_session(self, session: Session) -> None:
        """Open every later end in ``session``: the harness gives each host of a run the run's,
        with the keys of that host's pairs."""
        self._session = session

    @property
    def session(self) -> Session:
        """The session the ends open in. Without :meth:`use_session` one is drawn the first time
        it is needed, so the ends of one transport object (a loopback test, one process) share it,
        and ends in different processes that were not given the same one cannot talk."""
        if self._session is None:
            self._session = Session.draw()
        return self._session

    def host_commands(self, intf: str, subnet: str) -> list[str]:
        """Shell commands to run on every emulated host before the job starts.

        ``intf`` is the host's interface toward the switch and ``subnet`` the prefix of its
        route (``10.0.0.0/24``). Used for per-host settings such as a lowered TCP minimum RTO;
        the default is none. The testbed resets routes before every run, so a setting never
        outlives the run that asked for it.
        """
        return []

    def bottleneck_queue(self) -> PriorityBands | None:
        """The queue this transport needs at the bottleneck (the switch port toward the PS):
        None, the default, for the testbed's plain FIFO of ``queue_pkts`` packets; or strict
        priority bands by DSCP (:class:`PriorityBands`). The runner sets it up before every run
        (:mod:`topologies.testbed.bottleneck`), so a run's queue is the one its transport asked
        for, whatever ran before it.
        """
        return None

    @abc.abstractmethod
    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout,
              up: Layout | None = None) -> ServerEnd:
        """Open the parameter server's end, bound to ``bind``, for the given worker addresses.

        ``layout`` is the shape of the parameters the PS broadcasts; ``up`` the shape of the
        messages the workers push (None: the same). They differ when workers compress their
        updates (:mod:`harness.training.compress`): the same segment names, shorter segments.
        """

    @abc.abstractmethod
    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout,
                up: Layout | None = None) -> WorkerEnd:
        """Open worker ``rank``'s end, bound to ``bind``, toward the server at ``server``
        (``layout`` and ``up`` as in :meth:`serve`)."""

    def mesh(self, rank: int, members: Sequence[Addr], parts: Sequence[Any]) -> End:
        """Open member ``rank``'s end of a collective job among ``members`` (bound to
        ``members[rank]``), for messages cut into ``parts`` (:mod:`transports.mesh`). A transport
        without one says so."""
        raise OptionError(f"{self.LABEL or self.slug} has no end for collectives (tree, ring).")
