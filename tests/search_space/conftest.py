"""Shared pieces of the search_space tests (the catalog's references: ``tests/references.py``;
expected properties: ``expected.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


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
