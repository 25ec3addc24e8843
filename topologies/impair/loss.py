"""Loss at each host's ingress, inside the host's own network namespace: the loss models, their
text form, and the rules and programs that apply them.

There is no netem on this kernel, and dropping on the switch side does nothing with userspace
Open vSwitch, so loss is applied where a packet is received. A ``netdev`` nftables table hooked
on the host interface's ingress counts every IPv4 packet that arrives (``arrived``) and every
packet it drops (``dropped``), so measured loss always comes from counters, not from the
configuration. Five loss models:

**Uniform** (``uniform:5``, or plain ``5``): each IPv4 packet is dropped independently with
probability ``loss_pct / 100`` by the nftables rule itself (``numgen random``, resolution 1e-6;
the kernel's generator, which cannot be seeded).

**Replayable uniform** (``replay:5``): the same independent loss, drawn by the seeded eBPF program
below instead of the kernel's generator (the per-packet chain held in its good state). Whether the
``i``-th IPv4 packet arriving at a host is dropped is then a function of the run's seed, the host
and ``i`` alone: two runs with the same seed (two schemes, say) meet the same losses packet
position by packet position on every link into a host, however different their traffic.

**Gilbert-Elliott** (``ge:5:4``, ``ge:loss=5,burst=4``, or the full
``ge:p_gb=1.32,p_bg=25,loss_good=0,loss_bad=100``): a two-state Markov chain, good and bad,
stepped once per IPv4 packet at the host's ingress. A packet is dropped with probability
``loss_good`` in the good state and ``loss_bad`` in the bad state, and then the chain moves
good -> bad with probability ``p_gb`` or bad -> good with ``p_bg`` (all in percent in the text
form). The user-facing form gives a mean loss rate and a mean burst length (consecutive drops):
it is Gilbert's special case, ``loss_good = 0`` and ``loss_bad = 100``, so every stay in the bad
state is one burst: ``p_bg = 1 / burst`` and ``p_gb = p_bg * loss / (1 - loss)``, which makes the
stationary share of bad packets, the mean loss, equal to ``loss``. Its drops too are a function
of the seed, the host and the packet's position: it is replayable as ``replay:`` is.

**Gilbert-Elliott in time** (``get:5:2``, ``get:loss=5,burst_ms=2``, or the full
``get:good_ms=38,bad_ms=2,loss_good=0,loss_bad=100``): the same two states, but each held for an
exponentially distributed time (mean ``good_ms``, ``bad_ms``) whatever the packets do, as a fading
link or a congested queue would: a continuous-time Markov chain. A packet arriving in a state is
dropped with that state's loss probability (percent in the text). The short form is again
Gilbert's case: loss periods of mean ``burst_ms`` and good periods of mean
``burst_ms * (1 - loss) / loss``, so the share of time in the bad state, which is the share of
packets of any flow that does not follow the chain, is ``loss``. A sparse flow, one packet per
timeout, is not held in the bad state for several of its packets: at 50 ms between packets,
``get:5:2``'s packets are lost independently (:meth:`GilbertElliottTime.at_interval` gives the
per-packet chain a paced flow sees). The program counts the bad periods and their drawn
durations, so the mean bad period of every run is measured too.

The chains and traces run as one eBPF program at the interface's tc ingress
(``topologies/impair/geloss/``: a cls_bpf direct-action filter under a clsact qdisc, loaded and
configured by the ``ge-loss`` helper). It does not drop; it marks the packets to drop
(``skb->mark``), and the same nftables table, which the kernel runs right after tc ingress, counts
them as arrived, drops the marked ones and counts them as dropped: the measured loss means exactly
what it means under uniform loss. The program also counts runs of consecutive drops (``bursts``),
so every run's mean burst length is measured (``dropped / bursts``). Its random numbers
(splitmix64) are seeded: one seed, one sequence of decisions per host for one sequence of packets
(for the time-based chain, for one sequence of packet arrival times, so it is not replayable by
seed; its recorded trace is).

**A recorded trace** (``trace:DIR``): every chained model (``replay``, ``ge``, ``get`` and a trace
itself) writes the position of every packet it drops into a second map, and the runner saves each
host's as ``DIR/<host>.trace`` in the run's folder (``runs/<run_id>/loss/``,
:class:`~harness.running.runfiles.RunFiles`). ``trace:DIR`` replays them: host ``h`` drops the
``i``-th IPv4 packet it receives exactly when the recorded run dropped its ``i``-th, packets past
the trace's end are not dropped, and a host without a file loses nothing. The file format:
``topologies/impair/geloss/ge_trace.h`` (:mod:`topologies.impair.trace`). How the time-based
chain draws durations without floating point: ``topologies/impair/geloss/ge_time.h``. Why eBPF,
with the measurements: ``docs/architecture.md`` (Loss).

All of them work unchanged on kernels that have netem.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from topologies.impair.delay import c_define, check_delay
from topologies.impair.trace import TRACE_SUFFIX, folder_loss_pct
from transports.base import UserError

TABLE = "ltp_impair"
RESOLUTION = 1_000_000
PROJECT = Path(__file__).resolve().parents[2]
GE_DIR = Path(__file__).resolve().parent / "geloss"
GE_BINARY = GE_DIR / "build" / "ge-loss"
MAX_LOSS_PCT = 50.0


class LossModelError(UserError, ValueError):
    """A loss model's text or parameters are invalid."""


def _c_define(header: str, name: str, pattern: str) -> str:
    return c_define(GE_DIR / header, name, pattern)


GE_MARK = int(_c_define("ge_chain.h", "GE_MARK", "0x[0-9a-fA-F]+"), 16)
# The mean durations the time-based chain accepts, in milliseconds.
GE_TIME_MIN_MS = float(_c_define("ge_time.h", "GE_TIME_MIN_MS", r"[\d.]+"))
GE_TIME_MAX_MS = float(_c_define("ge_time.h", "GE_TIME_MAX_MS", r"[\d.]+"))


def _check_pct(name: str, value: float, high: float = 100.0, *, below: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LossModelError(f"{name} must be a number of percent, not {value!r}.")
    if not (0 <= value < high if below else 0 <= value <= high):
        bound = f"below {high:g}" if below else f"at most {high:g}"
        raise LossModelError(f"{name} must be at least 0 and {bound} percent, not {value!r}.")
    return float(value)


@dataclasses.dataclass(frozen=True)
class Uniform:
    """Each IPv4 packet dropped independently with probability ``loss_pct / 100``."""

    loss_pct: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "loss_pct",
                           _check_pct("loss_pct", self.loss_pct, MAX_LOSS_PCT, below=True))

    @property
    def mean_loss_pct(self) -> float:
        """The expected share of packets dropped, in percent."""
        return self.loss_pct

    def text(self) -> str:
        """The canonical text form (``uniform:5``)."""
        return f"uniform:{self.loss_pct:g}"


@dataclasses.dataclass(frozen=True)
class ReplayUniform:
    """Uniform loss drawn by the seeded program: replayable by seed (the module docstring)."""

    loss_pct: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "loss_pct",
                           _check_pct("loss_pct", self.loss_pct, MAX_LOSS_PCT, below=True))

    mean_loss_pct = property(lambda self: self.loss_pct, doc="The expected share dropped, %.")

    def text(self) -> str:
        """The canonical text form (``replay:5``)."""
        return f"replay:{self.loss_pct:g}"

    def flags(self) -> dict[str, float]:
        """The helper's options: the per-packet chain kept in its good state."""
        return {"p-gb": 0.0, "p-bg": 0.0, "loss-good": self.loss_pct / 100, "loss-bad": 1.0}


@dataclasses.dataclass(frozen=True)
class GilbertElliott:
    """The two-state chain of the module docstring; every parameter in percent per packet."""

    p_gb_pct: float
    p_bg_pct: float
    loss_good_pct: float = 0.0
    loss_bad_pct: float = 100.0

    def __post_init__(self) -> None:
        for name in ("p_gb_pct", "p_bg_pct", "loss_good_pct", "loss_bad_pct"):
            object.__setattr__(self, name, _check_pct(name[:-4], getattr(self, name)))
        if self.p_bg_pct == 0 and self.p_gb_pct > 0:
            raise LossModelError("p_bg must be above 0 (the chain would stay bad for ever).")

    @classmethod
    def from_mean(cls, loss_pct: float, burst_pkts: float) -> GilbertElliott:
        """Gilbert's model with mean loss ``loss_pct`` and mean burst length ``burst_pkts``."""
        loss_pct = _check_pct("loss", loss_pct, MAX_LOSS_PCT, below=True)
        if isinstance(burst_pkts, bool) or not isinstance(burst_pkts, (int, float)) \
                or not (math.isfinite(burst_pkts) and burst_pkts >= 1):
            raise LossModelError(f"burst must be a mean burst length of at least 1 packet, "
                                 f"not {burst_pkts!r}.")
        p_bg = 1.0 / burst_pkts
        loss = loss_pct / 100
        return cls(100 * p_bg * loss / (1 - loss), 100 * p_bg, 0.0, 100.0)

    @property
    def bad_share(self) -> float:
        """The stationary probability of the bad state."""
        total = self.p_gb_pct + self.p_bg_pct
        return self.p_gb_pct / total if total else 0.0

    @property
    def mean_loss_pct(self) -> float:
        """The expected share of packets dropped, in percent."""
        pi_b = self.bad_share
        return (1 - pi_b) * self.loss_good_pct + pi_b * self.loss_bad_pct

    @property
    def mean_burst_pkts(self) -> float | None:
        """The expected length of a run of consecutive drops (None if nothing is dropped).

        Drops per burst start; a burst starts where a packet not dropped is followed by a drop.
        """
        lg, lb = self.loss_good_pct / 100, self.loss_bad_pct / 100
        gb, bg = self.p_gb_pct / 100, self.p_bg_pct / 100
        pi_b = self.bad_share
        pi_g = 1 - pi_b
        starts = pi_g * (1 - lg) * ((1 - gb) * lg + gb * lb) \
            + pi_b * (1 - lb) * (bg * lg + (1 - bg) * lb)
        loss = self.mean_loss_pct / 100
        return loss / starts if starts > 0 else None

    def is_gilbert(self) -> bool:
        """True for Gilbert's special case (no loss when good, all lost when bad)."""
        return self.loss_good_pct == 0 and self.loss_bad_pct == 100

    def text(self) -> str:
        """The canonical text form: ``ge:loss=..,burst=..`` for Gilbert's case, else in full."""
        if self.is_gilbert() and self.p_bg_pct > 0:
            # In Gilbert's case a burst is one stay in the bad state: 1 / p_bg packets on average.
            return f"ge:loss={self.mean_loss_pct:.6g},burst={100 / self.p_bg_pct:.6g}"
        return (f"ge:p_gb={self.p_gb_pct:.6g},p_bg={self.p_bg_pct:.6g},"
                f"loss_good={self.loss_good_pct:.6g},loss_bad={self.loss_bad_pct:.6g}")

    def probabilities(self) -> dict[str, float]:
        """The four parameters as probabilities (0..1), as the helper takes them."""
        return {"p-gb": self.p_gb_pct / 100, "p-bg": self.p_bg_pct / 100,
                "loss-good": self.loss_good_pct / 100, "loss-bad": self.loss_bad_pct / 100}

    def flags(self) -> dict[str, float]:
        """The helper's chain options (``--p-gb`` ...) and their values."""
        return self.probabilities()


def _check_ms(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not GE_TIME_MIN_MS <= value <= GE_TIME_MAX_MS:
        raise LossModelError(f"{name} must be a mean duration from {GE_TIME_MIN_MS:g} to "
                             f"{GE_TIME_MAX_MS:g} ms, not {value!r}.")
    return float(value)


@dataclasses.dataclass(frozen=True)
class GilbertElliottTime:
    """The time-based chain of the module docstring: mean durations of the good and the bad
    state in milliseconds, the loss probability in each in percent."""

    good_ms: float
    bad_ms: float
    loss_good_pct: float = 0.0
    loss_bad_pct: float = 100.0

    def __post_init__(self) -> None:
        for name in ("good_ms", "bad_ms"):
            object.__setattr__(self, name, _check_ms(name, getattr(self, name)))
        for name in ("loss_good_pct", "loss_bad_pct"):
            object.__setattr__(self, name, _check_pct(name[:-4], getattr(self, name)))

    @classmethod
    def from_mean(cls, loss_pct: float, burst_ms: float) -> GilbertElliottTime:
        """Gilbert's case with mean loss ``loss_pct`` and loss periods of mean ``burst_ms``."""
        loss_pct = _check_pct("loss", loss_pct, MAX_LOSS_PCT, below=True)
        if loss_pct == 0:
            raise LossModelError("loss must be above 0 for a time-based chain (write 0 for no "
                                 "loss).")
        burst_ms = _check_ms("burst_ms", burst_ms)
        loss = loss_pct / 100
        good_ms = burst_ms * (1 - loss) / loss
        if good_ms > GE_TIME_MAX_MS:
            raise LossModelError(f"loss {loss_pct:g} % with bursts of {burst_ms:g} ms needs good "
                                 f"periods of {good_ms:.6g} ms, above the {GE_TIME_MAX_MS:g} ms "
                                 "the chain accepts.")
        return cls(good_ms, burst_ms, 0.0, 100.0)

    @property
    def bad_share(self) -> float:
        """The stationary probability of the bad state: its share of time."""
        return self.bad_ms / (self.good_ms + self.bad_ms)

    @property
    def mean_loss_pct(self) -> float:
        """The expected share of packets dropped, in percent, for packets that arrive
        independently of the chain (any flow: the chain does not look at packets)."""
        pi_b = self.bad_share
        return (1 - pi_b) * self.loss_good_pct + pi_b * self.loss_bad_pct

    @property
    def relaxation_ms(self) -> float:
        """The chain's relaxation time: states this far apart are correlated by 1/e."""
        return self.good_ms * self.bad_ms / (self.good_ms + self.bad_ms)

    def at_interval(self, interval_ms: float) -> GilbertElliott:
        """The per-packet chain that a flow with ``interval_ms`` between its packets sees.

        Sampled every ``interval_ms``, the chain moves good -> bad with probability
        ``bad_share * (1 - e)`` and back with ``(1 - bad_share) * (1 - e)``, where
        ``e = exp(-interval_ms / relaxation_ms)``: at intervals much longer than the relaxation
        time each packet draws its state afresh, i.e. the flow sees independent loss.
        """
        if not (isinstance(interval_ms, (int, float)) and interval_ms > 0):
            raise LossModelError(f"interval_ms must be above 0, not {interval_ms!r}.")
        move = -math.expm1(-interval_ms / self.relaxation_ms)
        pi_b = self.bad_share
        return GilbertElliott(100 * pi_b * move, 100 * (1 - pi_b) * move, self.loss_good_pct,
                              self.loss_bad_pct)

    def is_gilbert(self) -> bool:
        """True for Gilbert's special case (no loss when good, all lost when bad)."""
        return self.loss_good_pct == 0 and self.loss_bad_pct == 100

    def text(self) -> str:
        """The canonical text form: ``get:loss=..,burst_ms=..`` for Gilbert's case, else in
        full."""
        if self.is_gilbert():
            return f"get:loss={self.mean_loss_pct:.6g},burst_ms={self.bad_ms:.6g}"
        return (f"get:good_ms={self.good_ms:.6g},bad_ms={self.bad_ms:.6g},"
                f"loss_good={self.loss_good_pct:.6g},loss_bad={self.loss_bad_pct:.6g}")

    def flags(self) -> dict[str, float]:
        """The helper's chain options (``--good-ms`` ...) and their values."""
        return {"good-ms": self.good_ms, "bad-ms": self.bad_ms,
                "loss-good": self.loss_good_pct / 100, "loss-bad": self.loss_bad_pct / 100}


@dataclasses.dataclass(frozen=True)
class Trace:
    """Replay the traces recorded in ``folder``: one ``<host>.trace`` per host (the module
    docstring); a relative folder is taken from the project's folder, wherever the process
    runs."""

    folder: str

    def __post_init__(self) -> None:
        folder = str(self.folder).strip()
        object.__setattr__(self, "folder", folder)
        if not folder or not self.path.is_dir():
            raise LossModelError(f"{folder or 'the trace'} is not a folder; give the loss/ folder "
                                 "of a run that ran under replay, ge or get loss.")
        if not self.files():
            raise LossModelError(f"{folder} holds no loss traces (*{TRACE_SUFFIX}); give the "
                                 "loss/ folder of a run that ran under replay, ge or get loss.")

    @property
    def path(self) -> Path:
        """The folder, absolute."""
        return PROJECT / self.folder if not Path(self.folder).is_absolute() else Path(self.folder)

    def files(self) -> dict[str, Path]:
        """Each host's trace file, by host name."""
        return {f.name[:-len(TRACE_SUFFIX)]: f
                for f in sorted(self.path.glob(f"*{TRACE_SUFFIX}"))}

    @property
    def mean_loss_pct(self) -> float:
        """The share of every host's recorded positions dropped, in percent."""
        return folder_loss_pct(self.path)

    def text(self) -> str:
        """The canonical text form (``trace:FOLDER``)."""
        return f"trace:{self.folder}"


LossModel = Uniform | ReplayUniform | GilbertElliott | GilbertElliottTime | Trace
# The models the eBPF program carries.
CHAINS = (ReplayUniform, GilbertElliott, GilbertElliottTime, Trace)


@dataclasses.dataclass(frozen=True)
class _ChainSyntax:
    """How one Gilbert-Elliott chain is written: ``KIND:LOSS:BURST``, ``KIND:loss=,BURST=`` or
    every parameter by name (in the constructor's order)."""
    cls: type
    burst: str  # the name of the mean burst: burst (packets) or burst_ms
    burst_what: str
    full: tuple[str, ...]
    usage: str

    @property
    def keys(self) -> set[str]:
        return {"loss", self.burst, *self.full}


_CHAINS = {
    "ge": _ChainSyntax(GilbertElliott, "burst", "the burst length",
                       ("p_gb", "p_bg", "loss_good", "loss_bad"),
                       "write ge:LOSS:BURST, for example ge:5:4 (5 % loss in bursts of 4 packets "
                       "on average)."),
    "get": _ChainSyntax(GilbertElliottTime, "burst_ms", "the burst duration",
                        ("good_ms", "bad_ms", "loss_good", "loss_bad"),
                        "write get:LOSS:BURST_MS, for example get:5:2 (5 % loss in periods of "
                        "2 ms on average)."),
}


def _number(text: str, what: str, whole: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LossModelError(f"{whole!r}: {what} must be a number, not {text!r}.") from None
    if not math.isfinite(value):
        raise LossModelError(f"{whole!r}: {what} must be a finite number, not {text!r}.")
    return value


def parse_loss(text: str | float) -> LossModel:
    """A loss model from its text form (see the module docstring); raise
    :class:`LossModelError` with one sentence if it is not one."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return Uniform(float(text))
    whole = str(text).strip()
    kind, sep, rest = whole.partition(":")
    kind = kind.strip().lower()
    try:
        if not sep and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|[-+]?(nan|inf)", kind):
            return Uniform(_number(kind, "a loss rate", whole))
        if kind == "uniform" and sep:
            return Uniform(_number(rest.strip(), "the loss rate", whole))
        if kind == "replay" and sep:
            return ReplayUniform(_number(rest.strip(), "the loss rate", whole))
        if kind == "trace" and sep:
            return Trace(rest.strip())
        if kind in _CHAINS and sep:
            return _parse_chain(_CHAINS[kind], rest, whole)
    except LossModelError as exc:
        if str(exc).startswith(repr(whole)):
            raise
        raise LossModelError(f"{whole!r}: {exc}") from None
    raise LossModelError(f"{whole!r} is not a loss model; write a rate in percent (5), "
                         "uniform:5, replay:5 (seeded), ge:5:4 (per packet), get:5:2 (in time) "
                         "or trace:FOLDER (recorded).")


def _pairs(rest: str, whole: str, keys: set[str]) -> dict[str, float]:
    values: dict[str, float] = {}
    for pair in re.split(r"[,:]", rest):
        key, eq, value = (s.strip() for s in pair.partition("="))
        if not eq or key not in keys:
            raise LossModelError(f"{whole!r}: {pair.strip()!r} is not one of "
                                 f"{', '.join(sorted(keys))} given as name=value.")
        if key in values:
            raise LossModelError(f"{whole!r}: {key} is given twice.")
        values[key] = _number(value, key, whole)
    return values


def _parse_chain(syntax: _ChainSyntax, rest: str, whole: str):
    if "=" not in rest:
        parts = rest.split(":")
        if len(parts) != 2:
            raise LossModelError(f"{whole!r}: {syntax.usage}")
        return syntax.cls.from_mean(_number(parts[0], "the loss rate", whole),
                                    _number(parts[1], syntax.burst_what, whole))
    values = _pairs(rest, whole, syntax.keys)
    if set(values) == {"loss", syntax.burst}:
        return syntax.cls.from_mean(values["loss"], values[syntax.burst])
    if set(values) == set(syntax.full):
        return syntax.cls(*(values[k] for k in syntax.full))
    raise LossModelError(f"{whole!r}: give either loss and {syntax.burst}, or all of "
                         f"{', '.join(syntax.full[:-1])} and {syntax.full[-1]}.")


@dataclasses.dataclass(frozen=True)
class Impairment:
    """What a host's ingress does to the packets it receives: a loss model (a model, or its text
    form, or a uniform rate in percent) and a one-way delay, with the seed of the loss
    randomness (``None``: a fresh one; uniform loss cannot be seeded and ignores it).

    ``Impairment("ge:5:4", delay_ms=10, seed=1)``; applied with
    :meth:`topologies.testbed.network.Testbed.configure`.
    """

    loss: LossModel | str | float = Uniform(0.0)
    delay_ms: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.loss, (Uniform, *CHAINS)):
            object.__setattr__(self, "loss", parse_loss(self.loss))
        object.__setattr__(self, "delay_ms", check_delay(self.delay_ms))
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2 ** 64):
            raise LossModelError(f"seed must be a whole number from 0 to 2**64 - 1, "
                                 f"not {self.seed!r}.")


def ruleset(intf: str, model: LossModel | float) -> str:
    """An nft script that (re)creates the impairment table for ``intf`` atomically.

    Under uniform loss the table drops by itself; under either Gilbert-Elliott chain it drops
    what the eBPF program marked. Either way it counts ``arrived`` and ``dropped``.
    """
    if not isinstance(model, (Uniform, *CHAINS)):
        model = Uniform(model)
    if isinstance(model, CHAINS):
        drop = f'        meta mark {GE_MARK:#x} counter name "dropped" drop\n'
    else:
        threshold = round(model.loss_pct / 100 * RESOLUTION)
        drop = (f'        meta protocol ip numgen random mod {RESOLUTION} < {threshold} '
                f'counter name "dropped" drop\n') if threshold > 0 else ""
    # "add; delete; add" is nft's idiom for replacing a table in one transaction.
    return (
        f"table netdev {TABLE}\n"
        f"delete table netdev {TABLE}\n"
        f"table netdev {TABLE} {{\n"
        f'    counter arrived {{ }}\n'
        f'    counter dropped {{ }}\n'
        f"    chain ingress {{\n"
        f'        type filter hook ingress device "{intf}" priority -500; policy accept;\n'
        f'        meta protocol ip counter name "arrived"\n'
        f"{drop}"
        f"    }}\n"
        f"}}\n"
    )


def ge_binary() -> Path:
    """The built ``ge-loss`` helper; raise :class:`LossModelError` if it has not been built."""
    if not GE_BINARY.is_file():
        raise LossModelError(f"the Gilbert-Elliott helper {GE_BINARY} is missing; run ./setup.sh "
                             "(or make -C topologies/impair/geloss).")
    return GE_BINARY


def ge_argv(command: str, intf: str, model: LossModel | Path | None = None,
            seed: int | None = None, stream: int = 0) -> list[str]:
    """The helper's command line: ``attach`` ``model`` to ``intf`` (seeded with ``seed`` and
    the host's ``stream`` number; a trace is given as the host's file), ``read`` its counters,
    ``dump`` its drops to the trace file ``model``, or ``detach`` it."""
    if command not in ("attach", "read", "dump", "detach"):
        raise LossModelError(f"command must be attach, read, dump or detach, not {command!r}.")
    argv = [str(ge_binary()), command, "--dev", intf]
    if command == "dump":
        return argv + ["--out", str(model)]
    if command == "attach" and isinstance(model, Path):
        return argv + ["--trace", str(model)]
    if command == "attach":
        for name, value in model.flags().items():
            argv += [f"--{name}", repr(value)]
        if seed is not None:
            argv += ["--seed", str(seed)]
        argv += ["--stream", str(stream)]
    return argv


def parse_counters(nft_json: str) -> dict[str, int]:
    """``{"arrived": packets, "dropped": packets}`` from ``nft -j list counters table ...``."""
    out = {"arrived": 0, "dropped": 0}
    for item in json.loads(nft_json)["nftables"]:
        counter = item.get("counter")
        if counter and counter.get("table") == TABLE and counter["name"] in out:
            out[counter["name"]] = int(counter["packets"])
    return out


def parse_ge_counters(text: str) -> dict:
    """The JSON line ``ge-loss read`` prints (packets, drops, bursts, the parameters; under the
    time-based chain also the good and bad periods begun and their summed durations)."""
    return json.loads(text.strip().splitlines()[-1])
