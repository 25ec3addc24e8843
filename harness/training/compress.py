"""Fewer bytes up: local steps, compressed pushes, error feedback and error reset.

Four run parameters (``RunSpec.compress``, ``local_steps``, ``error_reset``, ``reset_mode``;
sweep options ``--compress``, ``--local-steps``, ``--error-reset``, ``--reset-mode``), after Xie
et al., "CSER: Communication-efficient SGD with Error Reset" (NeurIPS 2020). What the paper
describes and what is built here, point by point: ``docs/compression.md``. Every open point is a
parameter:

- **Local steps** ``H``: a worker that pulled the parameters ``x`` takes ``H`` SGD steps of the
  run's ``lr`` on its own batches, reaching ``x_H``, and pushes the update in gradient units,
  ``u = (x - x_H) / lr``. The PS's step ``x -= lr * mean(u)`` then moves the model to the mean
  of the workers' local models (local SGD). ``H = 1`` is today's gradient.
- **Compression** of each push (per layer, so PLOT's per-layer bounds still mean something):

  ==================  ===============================================================  ========
  text                what a layer of ``n`` coordinates becomes                          ratio
  ==================  ===============================================================  ========
  ``none``            the dense update                                                  1
  ``topk:R``          the ``k = max(1, ceil(R n))`` largest-magnitude coordinates, as     ~``2R``
                      (index, value) pairs; 0 elsewhere (``R`` default 0.01)
  ``sign``            one scale (the layer's mean ``|v|``) and one bit per coordinate:   ~1/32
                      ``scale * sign(v)`` (scaled sign, as EF-signSGD)
  ==================  ===============================================================  ========

- **Residual**, kept by each compressing worker; what it does with it is the ``reset_mode``
  (:func:`residual_keeper` returns the worker's :class:`ResidualKeeper`):

  - ``drop`` (:class:`ErrorFeedback`, the default, named for what it does): error feedback, the
    worker compresses ``s = u + e`` to ``c`` and keeps ``e = s - c``; every ``R`` pushes
    (``error_reset``; 0: never) it sets ``e`` to zero after the push, so the part of that round
    the compressor left out is dropped for good. Default ``R = 1``: no residual crosses a round.
  - ``cser`` (:class:`ErrorReset`): the worker's *local model* is ``x + e`` (``e`` in parameter
    units). A gradient round computes ``u`` at the local model, pushes ``C(u)`` and keeps
    ``e -= lr * (u - C(u))``; after every ``R`` gradient rounds the next round is a *residual
    synchronisation*: the worker pushes ``C(-e / lr)``, which the PS's ordinary step turns into
    ``x += mean C(e)``, and keeps ``e -= C(e)``. The mean of the workers' local models moves
    exactly as plain SGD on the mean of their full updates (nothing is lost, only late), and
    the PS's ``x`` trails it by the mean residual. ``C`` is the run's one compressor for both
    (transports carry one push layout per run).

  Without compression both reduce to plain SGD: the residual stays zero and no round is spent
  on it (the spec then records ``drop``).

On the wire a compressed push has the model's layers as segments, shorter (:func:`up_layout`);
indices and packed sign bits travel as the bit patterns of float32 words, since transports carry
float32 vectors. The PS decodes each delivery back to a dense gradient (:func:`decode`) before
anything else sees it, and trusts nothing: a pair whose index or value did not arrive, an index
outside its layer, a value or scale that is not finite, is dropped (counted in the delivery's
``compress_dropped``). A sign word that did not arrive leaves its 32 coordinates missing in the
dense mask, so a masked mean averages them over the workers that delivered them.

Light on purpose (numpy only): the spec and command line parse with it; the unit tests check
every encoding exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import numpy as np

from transports.base import Delivery, Layout, UserError

# kind -> (parameter's meaning, default); the one table the parser, docs and errors share.
COMPRESSORS: dict[str, tuple[str, float | None]] = {
    "none": ("no compression", None),
    "topk": ("R: fraction of each layer's coordinates kept", 0.01),
    "sign": ("no parameter: scaled sign, 1 bit per coordinate", None),
}
DEFAULT_RESET = 1
# reset_mode -> what an error reset does with the residual; the one table the spec, the command
# line and the docs share.
RESET_MODES: dict[str, str] = {
    "drop": "error feedback; every R pushes the residual is set to zero (dropped)",
    "cser": "local models x + e; every R gradient rounds one round synchronises the residual",
}


class CompressError(UserError, ValueError):
    """A ``--compress`` text names no compressor, or a parameter out of range."""


@dataclasses.dataclass(frozen=True)
class Compression:
    """A parsed ``--compress`` value."""

    kind: str = "none"
    ratio: float | None = None   # topk's kept fraction

    @property
    def on(self) -> bool:
        return self.kind != "none"

    def text(self) -> str:
        return f"topk:{self.ratio:g}" if self.kind == "topk" else self.kind


_TEXT = re.compile(r"^(?P<kind>[a-z]+)(?::(?P<param>[^:]+))?$")


def parse_compress(text: str) -> Compression:
    """``"none"``, ``"sign"``, ``"topk"`` or ``"topk:0.05"`` -> :class:`Compression`."""
    m = _TEXT.match(str(text).strip())
    kind = m.group("kind") if m else ""
    if kind not in COMPRESSORS:
        raise CompressError(f"--compress {text!r}: write none, sign or topk[:R] "
                            f"(R the fraction kept, e.g. topk:0.01).")
    param = m.group("param")
    if kind != "topk":
        if param is not None:
            raise CompressError(f"--compress {text!r}: {kind} takes no parameter.")
        return Compression(kind)
    try:
        ratio = float(param) if param is not None else COMPRESSORS["topk"][1]
    except ValueError:
        raise CompressError(f"--compress {text!r}: R must be a number.") from None
    if not 0 < ratio <= 0.5:
        raise CompressError(f"--compress {text!r}: topk's R is the fraction of coordinates kept, "
                            f"above 0 and at most 0.5 (beyond that the pairs outweigh the dense "
                            f"layer).")
    return Compression("topk", ratio)


def parse_reset_mode(text: str) -> str:
    """``"drop"`` or ``"cser"`` (any case), or :class:`CompressError`."""
    mode = str(text).strip().lower()
    if mode not in RESET_MODES:
        raise CompressError(f"--reset-mode {text!r}: write {' or '.join(RESET_MODES)} "
                            f"(docs/compression.md).")
    return mode


def check_compress(text: str, local_steps: int, error_reset: int,
                   reset_mode: str = "drop") -> None:
    """Raise :class:`CompressError` unless the four parameters make a run."""
    parse_compress(text)
    if not isinstance(local_steps, int) or not 1 <= local_steps <= 1000:
        raise CompressError(f"--local-steps {local_steps!r}: give 1 to 1000 SGD steps per "
                            f"synchronisation.")
    if not isinstance(error_reset, int) or not 0 <= error_reset <= 100_000:
        raise CompressError(f"--error-reset {error_reset!r}: give the reset period in "
                            f"synchronisations, 0 (never) or more.")
    if parse_reset_mode(reset_mode) == "cser" and error_reset < 1:
        raise CompressError("--reset-mode cser synchronises the residual every R gradient "
                            "rounds: give --error-reset of at least 1, not 0.")


def _kept(comp: Compression, n: int) -> int:
    return max(1, math.ceil(comp.ratio * n))


def _seg_floats(comp: Compression, n: int) -> int:
    if comp.kind == "topk":
        return 2 * _kept(comp, n)
    if comp.kind == "sign":
        return 1 + -(-n // 32)
    return n


@functools.lru_cache(maxsize=16)   # asked once per message by encode and decode
def up_layout(layout: Layout, comp: Compression) -> Layout:
    """The layout of a compressed push: the model's layers, in order, each its encoded size."""
    if not comp.on:
        return layout
    return Layout.from_sizes([(s.name, _seg_floats(comp, s.length)) for s in layout.segments])


def encode(values: np.ndarray, layout: Layout, comp: Compression) -> tuple[np.ndarray, np.ndarray]:
    """(wire vector in :func:`up_layout`, the dense vector it decodes to when all arrives)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if not comp.on:
        return values, values
    up = up_layout(layout, comp)
    wire = np.empty(up.n_floats, dtype=np.float32)
    dense = np.zeros_like(values)
    for s, u in zip(layout.segments, up.segments):
        v = values[s.offset:s.offset + s.length]
        out = wire[u.offset:u.offset + u.length]
        if comp.kind == "topk":
            k = _kept(comp, s.length)
            idx = np.sort(np.argpartition(np.abs(v), s.length - k)[s.length - k:]).astype(np.int32)
            out[0::2] = idx.view(np.float32)
            out[1::2] = v[idx]
            dense[s.offset + idx] = v[idx]
        else:
            scale = np.float32(np.abs(v).mean()) if s.length else np.float32(0)
            bits = np.packbits(v >= 0, bitorder="little")
            words = np.zeros(4 * (u.length - 1), dtype=np.uint8)
            words[:bits.size] = bits
            out[0] = scale
            out[1:] = words.view(np.uint32).view(np.float32)
            dense[s.offset:s.offset + s.length] = np.where(v >= 0, scale, -scale)
    return wire, dense


def decode(delivery: Delivery, layout: Layout, comp: Compression) -> Delivery:
    """A compressed push as the dense gradient it encodes, trusting nothing in it.

    The returned delivery keeps the transport's ``received_frac``, ``segment_fracs`` and stats
    (they describe the wire), with ``compress_dropped`` added: the pairs or words dropped as
    lost, out of range or not finite.
    """
    if not comp.on:
        return delivery
    up = up_layout(layout, comp)
    wire = np.asarray(delivery.values, dtype=np.float32)
    got = delivery.mask if delivery.mask is not None else np.ones(up.n_floats, dtype=np.bool_)
    dense = np.zeros(layout.n_floats, dtype=np.float32)
    mask = None if comp.kind == "topk" else np.ones(layout.n_floats, dtype=np.bool_)
    dropped = 0
    for s, u in zip(layout.segments, up.segments):
        w, m = wire[u.offset:u.offset + u.length], got[u.offset:u.offset + u.length]
        if comp.kind == "topk":
            idx, val = w[0::2].view(np.int32), w[1::2]
            ok = m[0::2] & m[1::2] & (idx >= 0) & (idx < s.length) & np.isfinite(val)
            dropped += int(ok.size - ok.sum())
            dense[s.offset + idx[ok]] = val[ok]
        else:
            scale = w[0]
            n_words = u.length - 1
            if not (m[0] and np.isfinite(scale)):
                mask[s.offset:s.offset + s.length] = False   # no scale: the layer is missing
                dropped += n_words
                continue
            bits = np.unpackbits(w[1:].view(np.uint32).view(np.uint8),
                                 bitorder="little")[:s.length].astype(bool)
            word_ok = np.repeat(m[1:], 32)[:s.length]
            dropped += int(n_words - m[1:].sum())
            dense[s.offset:s.offset + s.length] = np.where(bits, scale, -scale) * word_ok
            mask[s.offset:s.offset + s.length] = word_ok
    if mask is not None and mask.all():
        mask = None
    stats = dict(delivery.stats, compress_dropped=float(dropped))
    return Delivery(dense, mask, delivery.received_frac, delivery.segment_fracs, stats)


class ResidualKeeper:
    """A worker's side of compressed pushes: the model it loads, what it pushes, the residual it
    keeps. The worker loop asks :meth:`due` each round; a due round pushes :meth:`sync`, any
    other loads :meth:`local` and pushes :meth:`push` of its update.

    >>> keeper = residual_keeper(layout, parse_compress("topk:0.01"), 4, "cser", lr=0.2)
    >>> wire = keeper.sync() if keeper.due() else keeper.push(update_at(keeper.local(pulled)))
    """

    def __init__(self, layout: Layout, comp: Compression, reset: int = DEFAULT_RESET) -> None:
        self.layout, self.comp, self.reset = layout, comp, reset
        self.residual = np.zeros(layout.n_floats, dtype=np.float32)
        self.pushes = 0   # gradient rounds pushed
        self.syncs = 0    # residual synchronisations pushed

    def due(self) -> bool:
        """Whether this round is a residual synchronisation (push :meth:`sync`, no gradient)."""
        return False

    def local(self, pulled: np.ndarray) -> np.ndarray:
        """The model to compute the round's update at, from the pulled parameters."""
        return pulled

    def push(self, update: np.ndarray) -> np.ndarray:
        """The wire vector of a gradient round's ``update`` (gradient units, computed at
        :meth:`local`); updates the residual."""
        raise NotImplementedError

    def sync(self) -> np.ndarray:
        """The wire vector of a residual synchronisation; updates the residual."""
        raise RuntimeError("no residual synchronisation is due: ask due() first.")

    @property
    def residual_norm(self) -> float:
        return float(np.linalg.norm(self.residual))


class ErrorFeedback(ResidualKeeper):
    """``drop``: compress each update with error feedback, reset (drop) the residual every
    ``reset`` pushes.

    >>> ef = ErrorFeedback(layout, parse_compress("topk:0.01"), reset=1)
    >>> wire = ef.push(update)   # what goes on the wire; ef.residual keeps the rest
    """

    def push(self, update: np.ndarray) -> np.ndarray:
        self.pushes += 1
        if not self.comp.on:
            return np.ascontiguousarray(update, dtype=np.float32)
        pending = self.residual + update
        wire, sent = encode(pending, self.layout, self.comp)
        if self.reset and self.pushes % self.reset == 0:
            self.residual[:] = 0.0    # error reset: the rest of this round is dropped
        else:
            self.residual = pending - sent
        return wire


class ErrorReset(ResidualKeeper):
    """``cser``: a local model ``x + e`` per worker; every ``reset`` gradient rounds the next
    round synchronises the residual instead (the module docstring has the steps).

    ``lr`` is the run's: the residual is in parameter units, pushes in gradient units.
    """

    def __init__(self, layout: Layout, comp: Compression, reset: int, lr: float) -> None:
        if reset < 1 or not lr > 0:
            raise CompressError(f"cser needs a reset period of at least 1 and lr above 0, not "
                                f"{reset!r} and {lr!r}.")
        super().__init__(layout, comp, reset)
        self.lr = float(lr)
        self.since = 0   # gradient rounds since the last synchronisation

    def due(self) -> bool:
        # Without compression the residual is always zero: no round is spent on it.
        return self.comp.on and self.since >= self.reset

    def local(self, pulled: np.ndarray) -> np.ndarray:
        if not self.comp.on:
            return pulled
        return np.asarray(pulled, dtype=np.float32) + self.residual

    def push(self, update: np.ndarray) -> np.ndarray:
        self.pushes += 1
        self.since += 1
        update = np.ascontiguousarray(update, dtype=np.float32)
        if not self.comp.on:
            return update
        wire, sent = encode(update, self.layout, self.comp)
        # What the compressor left out stays in this worker's local model.
        self.residual -= self.lr * (update - sent)
        return wire

    def sync(self) -> np.ndarray:
        if not self.due():
            return super().sync()
        # The PS's step x -= lr * mean(push) adds mean C(e) to x; this worker keeps the rest.
        wire, sent = encode(-self.residual / self.lr, self.layout, self.comp)
        self.residual += self.lr * sent
        self.since = 0
        self.syncs += 1
        return wire


def residual_keeper(layout: Layout, comp: Compression, reset: int, mode: str,
                    lr: float) -> ResidualKeeper:
    """The keeper of a run's ``reset_mode``: :class:`ErrorFeedback` (``drop``) or
    :class:`ErrorReset` (``cser``)."""
    if parse_reset_mode(mode) == "cser":
        return ErrorReset(layout, comp, reset, lr)
    return ErrorFeedback(layout, comp, reset)
