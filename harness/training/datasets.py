"""The data set registry: image classification sets from Debian packages, never downloaded.

``fashion-mnist`` comes from the Debian package ``dataset-fashion-mnist`` (IDX files under
``/usr/share/datasets/fashion-mnist``). The first use decodes the gzip'd IDX files into ``.npy``
files in the project's state folder; later uses memory-map those, so nine processes starting at
once do not each decompress 30 MB.

Who trains on what (:func:`split`, :func:`shard`): one permutation of the training set, fixed by
the run's seed, is dealt out to the workers round-robin. With ``RunSpec.holdout`` = ``N`` > 0 its
last ``N`` entries are the parameter server's own validation set (``score`` and ``zeno++`` draw
their batches from it, :mod:`harness.hosts.robust`) and the workers are dealt the rest, so no
worker ever trains on a held-out sample and the validator never needs a worker's data. Each
worker's shard is then a prefix of the one it has without a holdout; with ``N`` = 0 nothing
changes.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import os
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np
from transports.base import UserError

if TYPE_CHECKING:  # imported where data is loaded, so naming a data set stays cheap
    import torch

PROJECT_DIR = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("LTP_STATE_DIR", PROJECT_DIR / ".state")) / "datasets"


class DatasetError(UserError, RuntimeError):
    """A data set is unknown or its files are missing."""


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Where a data set's IDX files are and how to normalise it."""

    name: str
    folder: Path
    mean: float
    std: float
    package: str


MAX_HOLDOUT = 30_000   # at most half of Fashion-MNIST's training set stays with the PS

DATASETS = {
    "fashion-mnist": DatasetInfo("fashion-mnist", Path("/usr/share/datasets/fashion-mnist"),
                                 0.2860, 0.3530, "dataset-fashion-mnist"),
}


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _cached(info: DatasetInfo, split: str) -> tuple[np.ndarray, np.ndarray]:
    prefix = {"train": "train", "test": "t10k"}[split]
    images_npy = CACHE_DIR / f"{info.name}-{split}-images.npy"
    labels_npy = CACHE_DIR / f"{info.name}-{split}-labels.npy"
    if not (images_npy.exists() and labels_npy.exists()):
        src_images = info.folder / f"{prefix}-images-idx3-ubyte.gz"
        src_labels = info.folder / f"{prefix}-labels-idx1-ubyte.gz"
        if not src_images.exists():
            raise DatasetError(f"{src_images} is missing; run ./setup.sh (it installs the Debian "
                               f"package {info.package}).")
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        for arr, dest in ((_read_idx(src_images), images_npy), (_read_idx(src_labels), labels_npy)):
            tmp = dest.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, arr)
            os.replace(tmp, dest)  # concurrent first uses each write whole files
    return np.load(images_npy, mmap_mode="r"), np.load(labels_npy, mmap_mode="r")


@functools.lru_cache(maxsize=4)
def load(name: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(images as normalised float32 [N, 784], labels as int64 [N]) of ``split`` (train|test)."""
    if name not in DATASETS:
        raise DatasetError(f"unknown data set {name!r}; choose one of: {', '.join(DATASETS)}.")
    import torch

    info = DATASETS[name]
    images, labels = _cached(info, split)
    x = torch.from_numpy(np.asarray(images, dtype=np.float32).reshape(len(images), -1) / 255.0)
    return (x - info.mean) / info.std, torch.from_numpy(np.asarray(labels, dtype=np.int64))


def split(n_items: int, seed: int, holdout: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(the indices the workers share, the ``holdout`` indices only the PS uses), disjoint and
    together all of ``n_items``, fixed by ``seed``."""
    if not 0 <= holdout < n_items:
        raise DatasetError(f"a holdout of {holdout} samples does not fit a training set of "
                           f"{n_items}; keep it below that.")
    perm = np.random.default_rng(seed).permutation(n_items)
    return perm[:n_items - holdout], perm[n_items - holdout:]


def shard(n_items: int, rank: int, n_workers: int, seed: int, holdout: int = 0) -> np.ndarray:
    """The indices of worker ``rank``'s disjoint share of ``n_items``, fixed by ``seed``, from
    what the PS did not hold out (:func:`split`)."""
    return split(n_items, seed, holdout)[0][rank::n_workers]


class Batches:
    """A worker's minibatches: its shard, in a fresh random order (from ``rng``) every pass."""

    def __init__(self, indices: np.ndarray, rng: np.random.Generator) -> None:
        self.indices = indices
        self.rng = rng
        self.order, self.pos = rng.permutation(indices), 0

    def next(self, size: int) -> np.ndarray:
        """The next ``size`` indices (a new pass begins when fewer than ``size`` are left)."""
        if self.pos + size > len(self.order):
            self.order, self.pos = self.rng.permutation(self.indices), 0
        batch = self.order[self.pos:self.pos + size]
        self.pos += size
        return batch
