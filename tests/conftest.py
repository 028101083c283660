"""Shared fixtures for every test package.

Databases (owned by the storage helper; use them instead of building URLs yourself):

- ``database_url``: parametrised over ``sqlite`` (a fresh file in ``tmp_path``) and
  ``postgresql`` (a uniquely named database created on ``Settings.test_postgres_url``'s server
  and dropped afterwards). A test that takes it runs once per backend, ids ``[sqlite]`` and
  ``[postgresql]``; the PostgreSQL case carries the ``postgres`` marker (``-m "not postgres"``
  deselects it). The schema is NOT created: call ``Database(url).migrate()`` or use ``db``.
- ``sqlite_database_url`` / ``postgres_database_url``: one backend only, same lifetimes.
- ``db``: a migrated, empty ``normfree.storage.Database`` on each backend (same ids). One
  database per backend serves the whole session and is emptied before each test (fast); do not
  dispose it or alter its schema. ``repo``: a ``normfree.storage.Repository`` over ``db``.
- ``postgres_server_url``: the server URL (session-wide), for tests that manage databases.

When the PostgreSQL server is unreachable the PostgreSQL cases skip with the reason, except
under ``CI=true`` (``get_settings().ci``), where they fail: CI must never silently lose a backend.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from normfree.settings import get_settings

# Tests compare fidelity lines with reports: a board waits for its current line (api.lines),
# in this process and in every server a test starts (they inherit the environment).
os.environ.setdefault("NORMFREE_FIDELITY_LINE_WAIT_S", "120")
os.environ.setdefault("NORMFREE_FIDELITY_LINE_REWAIT_S", "120")
# ... and does not space them: a waited-for line that waits out 9x its predecessor's cost made a
# board read after a change take 65-89 s on a busy host.
os.environ.setdefault("NORMFREE_FIDELITY_LINE_SPACING", "0")
# Tests read their writes back at once: a read under a stream of writes would otherwise get the
# previous version while the new one builds (api.cache); test_cache checks that path.
os.environ.setdefault("NORMFREE_READ_STALE_WINDOW_S", "0")


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
    from normfree.testing.databases import scratch_postgres

    with scratch_postgres(postgres_server_url) as url:
        yield url


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def database_url(request: pytest.FixtureRequest) -> str:
    """One empty database per backend (see the module docstring)."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_database_url")
    return request.getfixturevalue("postgres_database_url")


@pytest.fixture(
    scope="session",
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def _migrated_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """One migrated database per backend for the whole session (``db`` empties it per test).

    Creating and migrating a PostgreSQL database costs about a second per test; emptying the
    tables costs milliseconds, and the tests stay as isolated (ids restart too).
    """
    from normfree.storage import Database
    from normfree.testing.databases import scratch_postgres

    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('shared-db') / 'normfree.db'}"
        else:
            server = request.getfixturevalue("postgres_server_url")
            url = stack.enter_context(scratch_postgres(server))
        database = Database(url)
        try:
            database.migrate()
            yield database
        finally:
            database.dispose()


def _empty_tables(database: Any) -> None:
    """Delete every row of normfree's tables (not alembic_version); ids start again at 1."""
    from sqlalchemy import text

    from normfree.storage.models import Base

    tables = list(reversed(Base.metadata.sorted_tables))  # children before parents
    with database.session() as s:
        if database.is_postgres:
            names = ", ".join(f'"{t.name}"' for t in tables)
            s.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for t in tables:
                s.execute(t.delete())


@pytest.fixture
def db(_migrated_database: object) -> object:
    """A migrated, empty ``normfree.storage.Database`` on each backend ([sqlite], [postgresql]).

    Shared across the session and emptied before each test: do not ``dispose()`` it and do not
    change its schema (take ``database_url`` and migrate it yourself for that).
    """
    _empty_tables(_migrated_database)
    return _migrated_database


@pytest.fixture
def repo(db: object) -> object:
    """A ``normfree.storage.Repository`` over ``db`` (max_attempts=3)."""
    from normfree.storage import Repository

    return Repository(db, max_attempts=3)  # type: ignore[arg-type]


# -- leaving the test process -------------------------------------------------------------------
#
# When pytest is this process's entry point (``python -m pytest``, the ``pytest`` script: what
# ``make test`` and CI run), the process leaves with pytest's exit status once pytest's own
# clean-ups and the ``atexit`` handlers (Ray's shutdown, multiprocessing's, logging's) have
# run, without the interpreter's teardown of every module and the native libraries' static
# destructors. Why: after every test had passed, one clean CI run on an Intel Xeon host
# (2026-12-05) ended with "terminate called after throwing an instance of 'std::bad_alloc'" in
# that teardown and exit status 2, so a green suite failed CI; the next run on the same commit
# exited cleanly. Nothing a test checks happens there (a server's own exit is checked where it
# runs: SIGTERM in the tests of ``normfree serve``). Where pytest is called from a script
# (``pytest.main``, ``tests/extend/drills.py``), the script goes on as usual.

_EXIT: dict[str, int] = {}


def _entry_point() -> bool:
    import sys

    first = Path(sys.argv[0])
    return first.name in {"pytest", "py.test"} or (
        first.name == "__main__.py" and first.parent.name == "pytest"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if _entry_point() and "leave" not in _EXIT:
        _EXIT["leave"] = 1
        config.add_cleanup(_leave)  # the first cleanup added runs last


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT["status"] = int(exitstatus)


def _leave() -> None:
    import atexit
    import sys

    status = _EXIT.get("status")
    if status is None:  # pytest ended before its session did (a usage error): its own way
        return
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
