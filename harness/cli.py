"""Command-line plumbing shared by the invoke tasks: user errors, signals, number lists."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator

from invoke.exceptions import Exit

from harness.hosts.faults import parse_fault
from harness.hosts.pattern import parse_pattern
from harness.hosts.sync import parse_sync
from harness.training.aggregators import AGGREGATORS, AggregatorError
from harness.training.byzantine import parse_byzantine
from harness.training.compress import parse_compress
from topologies.impair.loss import Uniform, parse_loss
from transports.base import UserError

# What the command line reports as one sentence, without a traceback: every error a user can
# cause derives from transports.base.UserError, whichever package raises it.
USER_ERRORS = (UserError,)


def require_root() -> None:
    """Exit with a sentence unless running as root."""
    if os.geteuid() != 0:
        raise Exit("This needs root (Mininet and Open vSwitch do): run it as root or with sudo.",
                   code=2)


def require_setup(also: tuple[str, ...] = ()) -> None:
    """Exit with a sentence if the setup has not been run (``also``: further programs this
    command needs, e.g. tcpdump for a capture)."""
    import shutil

    missing = [t for t in ("mnexec", "ovs-vswitchd", "nft", "tc", *also)
               if shutil.which(t) is None]
    if missing:
        raise Exit(f"{missing[0]} is missing: run ./setup.sh first.", code=2)


def _terminate(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user mistakes into one sentence and exit code 2, and SIGTERM into Ctrl-C."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except USER_ERRORS as exc:
        raise Exit(f"error: {exc}", code=2) from None
    except KeyboardInterrupt:
        raise Exit("interrupted: everything started was stopped and finished rows are kept; "
                   "run the same command to resume.", code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def numbers(text: str | None, kind=float, name: str = "value") -> tuple | None:
    """'0,1,2.5' -> (0.0, 1.0, 2.5); None stays None; a bad item exits with a sentence."""
    if text is None:
        return None
    try:
        return tuple(kind(x) for x in str(text).split(",") if x.strip() != "")
    except ValueError:
        raise Exit(f"error: {name} must be a comma-separated list of numbers, not {text!r}.",
                   code=2) from None


def number(text: str | None, kind=float, name: str = "value"):
    """'5' -> 5.0 (or ``kind``); None stays None; anything else exits with a sentence."""
    if text is None:
        return None
    try:
        value = kind(str(text).strip())
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise Exit(f"error: {name} must be {what}, not {text!r}.", code=2) from None
    return value


def items(text: str | None) -> tuple[str, ...] | None:
    """'0,ge:loss=5,burst=4,tcp:2' -> ('0', 'ge:loss=5,burst=4', 'tcp:2'): split on commas,
    but a piece that is only ``name=value`` continues the item before it (the options of a loss
    model or of cross traffic). None stays None."""
    if text is None:
        return None
    out: list[str] = []
    for piece in (p.strip() for p in str(text).split(",")):
        if not piece:
            continue
        if out and re.fullmatch(r"[A-Za-z_]\w*=[^:]*", piece) and ":" in out[-1]:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return tuple(out)


def losses(text: str | None) -> tuple | None:
    """'0,1,ge:5:4' -> (0.0, 1.0, 'ge:loss=5,burst=4'): uniform rates as numbers, other loss
    models as their canonical text; a bad item raises :class:`LossModelError` with a sentence."""
    if text is None:
        return None
    out = []
    for item in items(text):
        model = parse_loss(item)
        out.append(model.loss_pct if isinstance(model, Uniform) else model.text())
    return tuple(out)


def words(text: str | None) -> tuple[str, ...] | None:
    """'a,b' -> ('a', 'b'); None stays None."""
    if text is None:
        return None
    return tuple(x.strip() for x in text.split(",") if x.strip())


def syncs(text: str | None) -> tuple[str, ...] | None:
    """'bsp,SSP:2,async' -> ('bsp', 'ssp:2', 'async'); a bad item raises :class:`SyncError`."""
    return None if text is None else tuple(parse_sync(x).text() for x in words(text))


def patterns(text: str | None) -> tuple[str, ...] | None:
    """'ps,TREE:fanout=3,ring' -> canonical pattern texts; a bad item raises
    :class:`~harness.hosts.pattern.PatternError`."""
    return None if text is None else tuple(parse_pattern(x).text() for x in items(text))


def faults(text: str | None) -> tuple[str, ...] | None:
    """'none,kill@20,link@20:2s' -> canonical fault texts; a bad item raises :class:`FaultError`."""
    return None if text is None else tuple(parse_fault(x).text() for x in words(text))


def byzantines(text: str | None) -> tuple[str, ...] | None:
    """'0,2:sign-flip' -> canonical Byzantine texts; a bad item raises :class:`ByzantineError`."""
    return None if text is None else tuple(parse_byzantine(x).text() for x in words(text))


def compressions(text: str | None) -> tuple[str, ...] | None:
    """'none,TopK:0.01,sign' -> canonical texts; a bad item raises :class:`CompressError`."""
    return None if text is None else tuple(parse_compress(x.lower()).text() for x in words(text))


def aggregator_names(text: str | None) -> tuple[str, ...] | None:
    """'mean,Score' -> ('mean', 'score'); an unknown rule raises :class:`AggregatorError`."""
    if text is None:
        return None
    out = tuple(x.lower() for x in words(text))
    for name in out:
        if name not in AGGREGATORS:
            raise AggregatorError(f"unknown aggregator {name!r}; choose one of "
                                  f"{', '.join(AGGREGATORS)}.")
    return out
