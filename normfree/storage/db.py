"""One engine per process, sessions, and programmatic Alembic migrations.

SQLite (the embedded default) needs three things to take several writers (the driver, Ray
workers' heartbeats, the API) without "database is locked":

- WAL, so readers never block the writer and the writer never blocks readers;
- a busy timeout, so a writer waits for the lock instead of failing at once;
- writes that take the write lock when they *begin* (``BEGIN IMMEDIATE``). A deferred transaction
  that reads and then tries to write fails with SQLITE_BUSY without waiting when another writer
  committed in between (the busy handler cannot help a stale snapshot). So ``session()`` begins
  IMMEDIATE on SQLite, and ``session(readonly=True)`` begins a plain deferred read.

pysqlite's own transaction handling is switched off (``isolation_level=None``) so that SQLAlchemy
emits the ``BEGIN`` itself; this is the documented SQLAlchemy recipe.

PostgreSQL goes through psycopg 3 (``postgresql+psycopg://``) with default READ COMMITTED; rows
that two workers could race for are taken with ``SELECT ... FOR UPDATE SKIP LOCKED``.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from normfree.private import private_file

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

# Write sessions this process has committed (every write goes through ``Database.session``),
# counted once each commit has returned. The fast lane on PostgreSQL puts it in its stamp: a
# commit notice reaches the lane milliseconds after the commit, and a read this process makes
# right after its own write (a REST write, then a GET) must see it (read-your-writes).
_commits_lock = threading.Lock()
_commits = 0


def local_commits() -> int:
    """How many write sessions this process has committed."""
    return _commits


def _committed() -> None:
    global _commits
    with _commits_lock:  # never a lost count: the value after a commit differs from before it
        _commits += 1


class WouldBlock(BaseException):
    """Raised by every way into the database (:meth:`Database.session`, ``read``, ``read_one``)
    inside :func:`without_io`: the caller runs on an event loop and only wants what is already
    in memory; it catches this and does the read where blocking is allowed (a thread).

    A ``BaseException`` so that no ``except Exception`` on the way (a read that falls back to
    something else on an error) can take it for a failed read and answer wrongly. ``pending``: a
    read of the same thing in flight elsewhere, worth awaiting before going to a thread."""

    def __init__(self, pending: Future[Any] | None = None) -> None:
        super().__init__("a database read inside without_io()")
        self.pending = pending


_NO_IO: contextvars.ContextVar[bool] = contextvars.ContextVar("normfree_no_io", default=False)


@contextmanager
def without_io() -> Iterator[None]:
    """Within it, any database access raises :class:`WouldBlock` before it starts.

    Why: on PostgreSQL the API's small key reads went to threads, one hand-off per request
    (11% of the event loop's busy time under 32 readers and a writer), even when the value was
    already kept for the request's generation (``api.reads.GenerationMemo``); trying on the
    loop first, with this guard, answers those from memory and lets only real reads block a
    thread."""
    token = _NO_IO.set(True)
    try:
        yield
    finally:
        _NO_IO.reset(token)


def io_allowed() -> bool:
    """False inside :func:`without_io`."""
    return not _NO_IO.get()


def _check_io() -> None:
    if _NO_IO.get():
        raise WouldBlock()


# How long an SQLite writer waits for the lock before giving up (milliseconds).
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Execution option naming the BEGIN an SQLite transaction starts with.
_SQLITE_BEGIN = "normfree_sqlite_begin"
_BEGIN = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")}


def normalize_url(url: str) -> str:
    """Accept the usual spellings and pin the drivers we ship (psycopg 3, not psycopg2)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def _install_sqlite_events(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see module doc)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys = ON")
        # In-memory databases cannot use WAL; asking is harmless there.
        cur.execute("PRAGMA journal_mode = WAL")
        # WAL + NORMAL is durable across application crashes (not power loss) and much faster.
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_SQLITE_BEGIN, "IMMEDIATE")
        if mode is None:  # Database.read_one: each statement on its own (the driver autocommits)
            return
        # on the driver's connection: through SQLAlchemy's statement machinery the BEGIN cost
        # a third of a one-row read's transaction (``Database.read``, the API's hot path)
        conn.connection.dbapi_connection.execute(_BEGIN[mode])


# A pooled server connection unused for longer than this is pinged before it is lent.
PING_AFTER_IDLE_S = 5.0
_LAST_USED = "normfree_last_used"


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection before lending it only when it sat idle (SQLAlchemy's pessimistic
    recipe, with a clock): a connection the server dropped (a restart, an idle timeout) is
    replaced before a request uses it, as ``pool_pre_ping`` would, without the round trip on
    every checkout that ``pool_pre_ping`` costs (a third of a one-row read's server time on
    PostgreSQL, bench/results/read_scale.md). A connection lost while in steady use fails its
    request; the pool then replaces every connection of that generation."""

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        last = record.info.get(_LAST_USED)
        if last is not None and time.monotonic() - last < PING_AFTER_IDLE_S:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise DisconnectionError(f"pooled connection is gone: {exc}") from exc
        if not alive:
            raise DisconnectionError("pooled connection did not answer a ping")

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info[_LAST_USED] = time.monotonic()


log = logging.getLogger(__name__)


def tolerant_json_loads(text: str) -> Any:
    """Read a JSON column; text that is not JSON (a row corrupted by hand or by a crash, which
    SQLite's JSON text allows) reads as None with a warning, instead of failing every query
    that lists the row: the pages show what they can and say what they could not."""
    try:
        return json.loads(text)
    except ValueError:
        log.warning("a stored JSON value is not JSON and reads as null: %.80r", text)
        return None


class Database:
    """One engine for one database URL, with sessions and migrations.

    Create one per process (engines do not survive ``fork``; a Ray worker builds its own).
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = normalize_url(url)
        sa_url = make_url(self.url)
        self.dialect = sa_url.get_backend_name()
        # Connections kept open: the API's threads (settings.api_threads), its event loop and
        # background threads (study runner, analyses, prescreens) each hold at most one. With
        # fewer, the pool's overflow connections are opened and closed on every burst of reads,
        # and on SQLite every open runs the PRAGMAs below and rereads the schema.
        kwargs: dict[str, Any] = {"echo": echo}
        pooled = {"pool_size": 16, "max_overflow": 16}
        if self.dialect == "sqlite":
            db = sa_url.database
            kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
            kwargs["json_deserializer"] = tolerant_json_loads  # JSONB cannot hold non-JSON
            if db and db != ":memory:" and not db.startswith("file:"):
                # 0600 before SQLite opens it (its -wal/-shm take the same mode): token hashes
                # and private error texts are this user's only (normfree.private)
                private_file(db)
                kwargs.update(pooled)  # in-memory databases keep one connection per thread
        else:
            kwargs.update(pooled)
        self.engine: Engine = create_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            _install_sqlite_events(self.engine)
            read_engine = self.engine.execution_options(**{_SQLITE_BEGIN: "DEFERRED"})
        else:
            _ping_when_idle(self.engine)
            read_engine = self.engine
        self._read_engine = read_engine
        # One statement, no transaction. SQLite: no BEGIN (the driver's connection is in
        # autocommit, see _on_connect); SQLAlchemy's own AUTOCOMMIT level would be undone on
        # the connection's return to the pool by a reset that turns the driver's implicit
        # transactions back on. PostgreSQL: psycopg's autocommit, a client-side switch.
        self._one_engine = (
            self.engine.execution_options(**{_SQLITE_BEGIN: None})
            if self.dialect == "sqlite"
            else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._write = sessionmaker(self.engine, expire_on_commit=False)
        self._read = sessionmaker(read_engine, expire_on_commit=False)

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @contextmanager
    def session(self, *, readonly: bool = False) -> Iterator[Session]:
        """A session in one transaction: committed on exit, rolled back on an exception.

        ``readonly=True`` starts a deferred transaction on SQLite (no write lock); use it for
        queries only. The default takes the write lock up front on SQLite, see the module doc.
        """
        _check_io()
        maker = self._read if readonly else self._write
        with maker() as session, session.begin():
            yield session
        if not readonly:
            _committed()

    @contextmanager
    def read(self) -> Iterator[Any]:
        """A Core connection in one read transaction (deferred on SQLite; one snapshot).

        For the small, hot reads of the API (versions, stamps, pages): an ORM session costs
        several times the query itself there.
        """
        _check_io()
        with self._read_engine.begin() as conn:
            yield conn

    @contextmanager
    def read_one(self) -> Iterator[Any]:
        """A Core connection outside any transaction, for a read that is one statement (each
        statement sees the data as of its own start).

        Why: on PostgreSQL a transaction is three round trips (BEGIN, the query, COMMIT) where
        one statement needs one; on SQLite it skips the BEGIN and COMMIT. A read of several
        statements that must agree uses :meth:`read`.
        """
        _check_io()
        with self._one_engine.connect() as conn:
            yield conn

    def ping(self) -> None:
        """One round trip to the database (health checks); raises what the driver raises."""
        with self.read() as conn:
            conn.execute(text("SELECT 1"))

    def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema with Alembic (idempotent; safe to call at every start)."""
        from alembic import command

        with self.engine.connect() as conn:
            raw = conn.connection.dbapi_connection if self.is_sqlite else None
            if raw is not None:
                # SQLite batch migrations rebuild a table by copy, drop and rename; with foreign
                # keys ON, dropping a parent would cascade-delete its children's rows. The
                # pragma only takes effect outside a transaction, hence the raw connection.
                raw.execute("PRAGMA foreign_keys = OFF")
            try:
                command.upgrade(self.alembic_config(conn), revision)
                # Alembic commits its own transaction; make sure nothing is left open.
                conn.commit()
                if raw is not None:
                    broken = raw.execute("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration left dangling foreign keys: {broken[:5]}")
            finally:
                if raw is not None:
                    raw.execute("PRAGMA foreign_keys = ON")

    def current_revision(self) -> str | None:
        """The Alembic revision the database is at (None: not under Alembic yet)."""
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def alembic_config(self, connection: Any = None) -> Any:
        """An Alembic ``Config`` pointing at the packaged migrations (and this connection)."""
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        if connection is not None:
            cfg.attributes["connection"] = connection
        return cfg

    def dispose(self) -> None:
        """Close pooled connections (end of process or tests)."""
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Database({make_url(self.url).render_as_string(hide_password=True)!r})"


# -- Optuna's storage and server-level helpers ----------------------------------------------------


def optuna_study_name(study_id: int) -> str:
    """Optuna's name for our study: stable, so a restarted driver loads the same one (and the
    server finds what the driver stored with it, ``storage.study_documents``)."""
    return f"normfree-study-{study_id}"


def optuna_storage_url(settings: Any) -> str:
    """Where Optuna keeps its studies: beside ours, never in the same tables.

    Optuna's RDB storage names its tables ``studies``, ``trials``, ... like ours, so it cannot
    share our database. ``Settings.optuna_storage_url`` wins when set; otherwise SQLite gets a
    sibling file (``normfree.db`` -> ``normfree-optuna.db``) and PostgreSQL a sibling database on
    the same server (``normfree`` -> ``normfree_optuna``; create it with
    :func:`ensure_database`). ``optuna-dashboard <url>`` opens the result unchanged.
    """
    explicit = getattr(settings, "optuna_storage_url", None)
    if explicit:
        return normalize_url(explicit)
    url = make_url(normalize_url(settings.database_url))
    db = url.database or ""
    if url.get_backend_name() == "sqlite":
        if not db or db == ":memory:" or db.startswith("file:"):
            return url.render_as_string(hide_password=False)
        path = Path(db)
        sibling = path.with_name(f"{path.stem}-optuna{path.suffix or '.db'}")
        return url.set(database=str(sibling)).render_as_string(hide_password=False)
    return url.set(database=f"{db}_optuna").render_as_string(hide_password=False)


def _server_url(url: str) -> Any:
    """The maintenance database of the server holding ``url`` (PostgreSQL)."""
    return make_url(normalize_url(url)).set(database="postgres")


def ensure_database(url: str) -> bool:
    """Create the database ``url`` names if it is a missing PostgreSQL database.

    Returns True when it created one. A missing SQLite file is created empty and 0600 (SQLite
    would create it 0644 on first connect; Optuna's sibling file goes through here) and the
    answer stays False: SQLite needs nothing else.
    """
    sa_url = make_url(normalize_url(url))
    if sa_url.get_backend_name() == "sqlite":
        db = sa_url.database
        if db and db != ":memory:" and not db.startswith("file:"):
            private_file(db)
        return False
    if sa_url.get_backend_name() != "postgresql":
        return False
    name = sa_url.database
    engine = create_engine(_server_url(url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            exists = conn.exec_driver_sql(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).scalar()
            if exists:
                return False
            try:
                conn.exec_driver_sql(f'CREATE DATABASE "{_pg_ident(name)}"')
            except DBAPIError:
                # Another process created it between our check and our CREATE: that is fine.
                if conn.exec_driver_sql(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
                ).scalar():
                    return False
                raise
            return True
    finally:
        engine.dispose()


def drop_database(url: str) -> None:
    """Drop a PostgreSQL database (closing other sessions on it first); used by tests."""
    sa_url = make_url(normalize_url(url))
    if sa_url.get_backend_name() != "postgresql":
        raise ValueError("drop_database only drops PostgreSQL databases")
    engine = create_engine(_server_url(url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(
                f'DROP DATABASE IF EXISTS "{_pg_ident(sa_url.database)}" WITH (FORCE)'
            )
    finally:
        engine.dispose()


def _pg_ident(name: str | None) -> str:
    if not name or '"' in name or "\x00" in name:
        raise ValueError(f"unsafe database name {name!r}")
    return name
