"""Shared fixtures for every test package.

Databases (owned by the storage helper; use them instead of building URLs yourself):

- ``database_url``: parametrised over ``sqlite`` (a fresh file in ``tmp_path``) and
  ``postgresql`` (a uniquely named database created on ``Settings.test_postgres_url``'s server
  and dropped afterwards). A test that takes it runs once per backend, ids ``[sqlite]`` and
  ``[postgresql]``; the PostgreSQL case carries the ``postgres`` marker (``-m "not postgres"``
  deselects it). The schema is NOT created: call ``Database(url).migrate()`` or use ``db``.
- ``sqlite_database_url`` / ``postgres_database_url``: one backend only, same lifetimes.
- ``db``: a migrated ``normfree.storage.Database`` over ``database_url`` (both backends),
  disposed after the test. ``repo``: a ``normfree.storage.Repository`` over ``db``.
- ``postgres_server_url``: the server URL (session-wide), for tests that manage databases.

When the PostgreSQL server is unreachable the PostgreSQL cases skip with the reason, except
under ``CI=true`` (``get_settings().ci``), where they fail: CI must never silently lose a backend.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from normfree.settings import get_settings


def _server_unavailable(url: str) -> str | None:
    """None when the server answers, else the reason it does not."""
    from sqlalchemy import create_engine

    from normfree.storage import normalize_url

    engine = create_engine(normalize_url(url), connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return None
    except Exception as exc:  # any failure to connect means "not available here"
        return f"PostgreSQL at {url} unreachable: {type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """The PostgreSQL server the tests may create databases on; skip (fail under CI) if down."""
    url = get_settings().test_postgres_url
    reason = _server_unavailable(url)
    if reason is not None:
        if get_settings().ci:
            pytest.fail(f"{reason} (CI=true: a missing server is a failure, not a skip)")
        pytest.skip(reason)
    return url


@pytest.fixture
def sqlite_database_url(tmp_path: Path) -> str:
    """A fresh SQLite file URL (the file does not exist yet)."""
    return f"sqlite:///{tmp_path / 'normfree.db'}"


@pytest.fixture
def postgres_database_url(postgres_server_url: str) -> Iterator[str]:
    """A fresh, uniquely named PostgreSQL database, dropped after the test."""
    from sqlalchemy.engine import make_url

    from normfree.storage import drop_database, ensure_database, normalize_url

    name = f"normfree_test_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    url = (
        make_url(normalize_url(postgres_server_url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )
    ensure_database(url)
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def database_url(request: pytest.FixtureRequest) -> str:
    """One empty database per backend (see the module docstring)."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_database_url")
    return request.getfixturevalue("postgres_database_url")


@pytest.fixture
def db(database_url: str) -> Iterator[object]:
    """A migrated ``normfree.storage.Database`` on each backend."""
    from normfree.storage import Database

    database = Database(database_url)
    database.migrate()
    try:
        yield database
    finally:
        database.dispose()


@pytest.fixture
def repo(db: object) -> object:
    """A ``normfree.storage.Repository`` over ``db`` (max_attempts=3)."""
    from normfree.storage import Repository

    return Repository(db, max_attempts=3)  # type: ignore[arg-type]
