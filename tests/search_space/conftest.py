"""Shared pieces of the search_space tests: independent numpy/scipy references of science.md."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import torch

torch.set_num_threads(1)


def _clip(v: np.ndarray, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return np.minimum(np.maximum(v, lo), hi)


def _saturlog(u: np.ndarray) -> np.ndarray:
    L = np.log1p(np.abs(u))
    return L / (L + 1) * np.sign(u)


# science.md section 2 and 3, written independently of the catalog's formula strings.
REFERENCES = {
    "erf": scipy.special.erf,
    "tanh": np.tanh,
    "arctan": lambda u: 2 / np.pi * np.arctan(u),
    "satursin": lambda u: np.sin(np.clip(u, -np.pi / 2, np.pi / 2)),
    "expsign": lambda u: np.sign(u) * (1 - np.exp(-np.abs(u))),
    "exproot": lambda u: np.sign(u) * (1 - np.exp(-np.sqrt(np.abs(u)))),
    "relsign": lambda u: u / (np.sqrt(u**2 + 1) + 1),
    "isru": lambda u: u / np.sqrt(u**2 + 1),
    "cubsign": lambda u: u**3 / (np.abs(u) ** 3 + 1),
    "logsignclip": lambda u: _clip(np.sign(u) * np.log1p(np.abs(u))),
    "logquadclip": lambda u: _clip(np.sign(u) * np.log1p(u**2)),
    "arcsinhclip": lambda u: _clip(np.arcsinh(u)),
    "power23clip": lambda u: _clip(np.sign(u) * np.abs(u) ** (2 / 3)),
    "linearclip": lambda u: _clip(u),
    "smoothsign": lambda u: u / (1 + np.abs(u)),
    "saturlog": _saturlog,
    "linear": lambda u: u,
    "power23": lambda u: np.sign(u) * np.abs(u) ** (2 / 3),
    "logsign": lambda u: np.sign(u) * np.log1p(np.abs(u)),
    "logquad": lambda u: np.sign(u) * np.log1p(u**2),
    "asinh": np.arcsinh,
    "sin": np.sin,
    "dampx": lambda u: 2 * u / (1 + u**2),
    "dampexp": lambda u: 2.72 * u * np.exp(-np.abs(u)),
}

SEARCH16 = list(REFERENCES)[:16]

# A dense grid with 0 exactly, tiny and large |u|.
GRID = np.unique(
    np.concatenate(
        [np.linspace(-20, 20, 4001), [0.0, 1e-12, -1e-12, 1e-8, -1e-8, 100.0, -100.0, 1e4, -1e4]]
    )
)


@pytest.fixture(scope="session")
def catalog():
    from normfree.search_space import catalog as cat

    return cat
