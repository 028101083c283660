"""Fixtures of the engine tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.workers.engine_support import drop_optuna_database


@pytest.fixture
def url(database_url: str) -> Iterator[str]:
    """``database_url`` (both backends) plus cleanup of the Optuna database the engine creates
    beside a PostgreSQL one (the backend's own fixture drops only ours)."""
    yield database_url
    drop_optuna_database(database_url)
