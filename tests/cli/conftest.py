"""The CLI tests check formulas in their own process: a checker process (``candidates check``'s
default, ``normfree.search_space.checker``) would outlive the test run. The tests that are about
the checker turn it on for the processes they start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_checker() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMFREE_CHECKER", "false")
        yield
