"""Kernel-test setup: Triton's CPU interpreter, a private kernel cache, one thread.

``TRITON_INTERPRET`` must be set before ``triton`` is first imported (Triton decides at import
whether ``@triton.jit`` builds interpreter objects); ``normfree.kernels`` imports triton lazily
for exactly this reason. Test setup is the one place allowed to set environment variables.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch

_TRITON_TOO_EARLY = "triton" in sys.modules and not __import__("triton").knobs.runtime.interpret


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh cache per session (the process default), so generation itself is exercised."""
    from normfree.kernels import KernelOptions, set_default_options

    path = tmp_path_factory.mktemp("kernel_cache")
    set_default_options(KernelOptions(cache=path))
    yield path
    set_default_options(None)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def interpreter() -> None:
    """Tests of the Triton backend on CPU need the interpreter; say so loudly if it is off."""
    if _TRITON_TOO_EARLY:
        pytest.fail(
            "triton was imported before tests/kernels/conftest.py set TRITON_INTERPRET=1; "
            "run with TRITON_INTERPRET=1 in the environment"
        )
