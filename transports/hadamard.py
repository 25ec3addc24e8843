"""The randomized Hadamard transform of OptiReduce (:mod:`transports.optireduce`), in numpy.

A sender multiplies a part's floats by random signs and applies an orthonormal Walsh-Hadamard
transform, block by block; the receiver applies the same transform again and the same signs,
which undoes it (the transform is its own inverse and the signs square to one). A coordinate of
the coded vector that is lost in transit, filled with zero, then costs the decoded vector a
little noise spread over its whole block, instead of one coordinate's whole value.

**Blocks.** The transform works on lengths that are powers of two. A part of ``n`` floats is cut
into blocks of ``block`` floats (a power of two), and what is left, ``n mod block``, into one
block per set bit of its binary expansion, largest first (``n = 2 x 8192 + 2770`` gives blocks
of 8192, 8192, 2048, 512, 128, 64, 16 and 2). So nothing is padded: the coded part has exactly
``n`` floats, the wire carries what it would carry uncoded, and a block costs ``O(b log b)``.
The smallest blocks at the end spread a loss over few coordinates; they hold fewer than
``block`` floats in all.

**Signs.** One sign per float, drawn from a seed both ends know without a message: the run's
``hadamard_seed`` option, the sender's member number, the message id and the part
(:func:`signs`). Every message of a collective step has its own.

    >>> code = HadamardCode(seed=0, block=8192)
    >>> coded = code.encode(values, sender=2, msg_id=7, part=3)
    >>> values_again = code.decode(coded, sender=2, msg_id=7, part=3)
"""

from __future__ import annotations

import dataclasses

import numpy as np


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is 1, 2, 4, 8, ..."""
    return n >= 1 and n & (n - 1) == 0


def blocks(n: int, block: int) -> list[tuple[int, int, int]]:
    """How a part of ``n`` floats is cut: (offset, block size, how many blocks of that size in a
    row), full blocks of ``block`` first, then the rest by its binary expansion, largest first."""
    if not is_power_of_two(block):
        raise ValueError(f"a Hadamard block is a power of two, not {block}.")
    if n < 0:
        raise ValueError(f"a part has at least 0 floats, not {n}.")
    out, full = [], n // block
    if full:
        out.append((0, block, full))
    offset, rest = full * block, n % block
    size = block // 2
    while rest:
        if rest & size:
            out.append((offset, size, 1))
            offset, rest = offset + size, rest - size
        size //= 2
    return out


def fwht(rows: np.ndarray) -> np.ndarray:
    """The Walsh-Hadamard transform (unnormalized, Sylvester order) of every row of a 2-D float64
    array whose row length is a power of two, in place; returns it. ``O(n log n)``: one pass of
    butterflies per doubling."""
    count, n = rows.shape
    h = 1
    while h < n:
        pairs = rows.reshape(count, n // (2 * h), 2, h)
        first = pairs[:, :, 0, :].copy()
        pairs[:, :, 0, :] += pairs[:, :, 1, :]      # a + b
        pairs[:, :, 1, :] *= -1.0
        pairs[:, :, 1, :] += first                  # a - b
        h *= 2
    return rows


def signs(seed: int, sender: int, msg_id: int, part: int, n: int) -> np.ndarray:
    """``n`` random signs (+1.0 or -1.0, float64) of one message: a function of the run's seed,
    the sender's member number, the message id and the part only, so the receiver draws the same
    ones. The bits are a PCG64 stream's raw output (stable across numpy versions)."""
    entropy = [int(seed), int(sender), int(msg_id) & 0xFFFFFFFF, int(part)]
    if min(entropy) < 0:
        raise ValueError(f"seed, sender and part must be at least 0, not {entropy}.")
    words = np.random.PCG64(np.random.SeedSequence(entropy)).random_raw(-(-n // 64) or 1)
    bits = np.unpackbits(np.asarray(words, dtype="<u8").view(np.uint8))[:n]
    return 1.0 - 2.0 * bits.astype(np.float64)


def transform(values: np.ndarray, block: int, sign: np.ndarray,
              inverse: bool = False) -> np.ndarray:
    """The randomized transform of ``values`` in float64 (a new array): the signs, then the
    orthonormal Walsh-Hadamard transform of every block; with ``inverse``, the blocks' transform
    first and the signs after, which undoes it."""
    x = np.array(values, dtype=np.float64, copy=True).reshape(-1)
    if not inverse:
        x *= sign
    for offset, size, count in blocks(len(x), block):
        span = x[offset:offset + size * count].reshape(count, size)
        fwht(span)
        span *= 1.0 / np.sqrt(size)
    if inverse:
        x *= sign
    return x


@dataclasses.dataclass(frozen=True)
class HadamardCode:
    """The randomized Hadamard transform with one seed and block size: ``encode`` at the sender,
    ``decode`` at the receiver (float32 out, float64 inside)."""

    seed: int
    block: int

    def __post_init__(self) -> None:
        if not is_power_of_two(self.block):
            raise ValueError(f"a Hadamard block is a power of two, not {self.block}.")

    def encode(self, values: np.ndarray, sender: int, msg_id: int, part: int) -> np.ndarray:
        """The coded float32 vector of one message (as long as ``values``)."""
        n = np.asarray(values).size
        return transform(values, self.block,
                         signs(self.seed, sender, msg_id, part, n)).astype(np.float32)

    def decode(self, coded: np.ndarray, sender: int, msg_id: int, part: int) -> np.ndarray:
        """The values of one message from its coded vector (lost coordinates already zero)."""
        n = np.asarray(coded).size
        return transform(coded, self.block, signs(self.seed, sender, msg_id, part, n),
                         inverse=True).astype(np.float32)
