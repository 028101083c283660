"""The fast lane: a cached read's exact answer replayed before routing while nothing changed.

Why: at 32 concurrent clients on two cores, a cached leaderboard still spent most of its time
outside the cache: FastAPI's routing and dependencies, a pooled SQLAlchemy transaction for the
key's version query, building the response (bench/results/read_scale.md). None of that is
needed when the database has not changed since the same request was last answered. So this
ASGI middleware, outermost, keeps the bytes and headers of answers the routes marked as
replayable (:func:`allow`: a cacheable 200 from ``api.cache``), stamped with the
database's *generation* read at the request's start and the process's local epoch (the
function analyses done so far, ``api.enrich``, this process's lines and prescreens). A later
identical request whose stamp is the same gets those bytes back without touching the app. An
answer that served a read's previous version while its newer one built is replayable too,
until that build is in (the read cache's count for that answer's family, checked by the
answer's ``valid``): after a commit, the readers of one page share its first reader's answer
instead of each going the slow way.

It is exact, not a time-to-live (on PostgreSQL up to the milliseconds a commit notice takes,
below): a generation changes whenever any connection commits. The
stamp is read *before* the app computes its key, so an entry can only be older than its
stamp, never newer; an equal stamp later means no commit happened in between. After a commit,
an entry whose route handed over its key function (``allow(served, rekey)``) is replayed if
the request's key, computed again at the new generation, is still the key the body is of
(:meth:`FastLane._revalidate`): a commit moves one study of many, and the others' answers need
not go through the app again.

- SQLite (:class:`SqliteGeneration`): ``PRAGMA data_version`` on a dedicated read-only
  connection, microseconds on the event loop; it changes when any other connection (this
  process's pool, a Ray worker, the CLI) commits.
- PostgreSQL (:class:`PostgresNotifyGeneration`): a count of commit notices, which every
  table's trigger sends when a transaction that wrote it commits (migration 0014), kept by a
  LISTEN connection: a read from memory. It moves when this event loop reads the notice, so an
  answer may miss a commit of the last few milliseconds (one commit, never more at the rates a
  study writes). A database without the triggers reads the current snapshot instead
  (:class:`PostgresGeneration`, ``pg_current_snapshot()``, exact: a request waits for a query
  that started after it arrived, one query serving every request that waits for it).

Only anonymous ``GET`` requests take the lane (no ``Authorization``, ``Cookie`` or
``If-None-Match``: a token holder may see another body, and a conditional request goes the
usual way to its 304), and only while reads are public. Memory is bounded by bytes (LRU).

*Direct routes* take the same lane for reads that are rarely asked twice, so that replaying
cannot help (one trial of 100,000): the route's own answer function is called here, before
Starlette's routing and FastAPI's dependency resolution, which cost a third of such a read's
server time (bench/results/read_scale.md). The function is the route's (one answer, two ways
in); it returns None for anything it does not answer plainly (a missing row, an error), and
the request then goes through the app, which answers it the usual way.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from normfree.storage.db import local_commits

log = logging.getLogger(__name__)

SCOPE_KEY = "normfree.fastlane"  # the per-request marker a route sets through allow()
_SKIP = {b"authorization", b"cookie", b"if-none-match"}
# The database generation read at this request's start, for the app's own reads of versions
# (``api.reads.at_generation``): what a key reads cannot have changed while it holds. Set only
# for requests that take the lane; each request runs in its own task, so in its own context.
GENERATION: contextvars.ContextVar[Hashable | None] = contextvars.ContextVar(
    "normfree_generation", default=None
)

# How long a request waits for the same read in flight before going through the app itself:
# a cached read's slow path takes a few ms; a rebuild can take seconds.
SHARE_WAIT_S = 0.05


# A route's key for this request, computed again (``allow(rekey=...)``): what the lane compares
# with the key its answer was of when the generation moved.
Rekey = Callable[[], Awaitable[Hashable]]


# Whether a stored answer still holds beside the database (``api.cache``: its family's rebuilds).
Valid = Callable[[], bool]


class _Marker:
    """Set by a route when its answer may be replayed (it is the fresh answer for its key)."""

    __slots__ = ("ok", "rekey", "served", "valid")

    def __init__(self) -> None:
        self.ok = False
        self.served: Hashable | None = None
        self.rekey: Rekey | None = None
        self.valid: Valid | None = None


def allow(
    scope: Scope,
    served: Hashable | None = None,
    rekey: Rekey | None = None,
    valid: Valid | None = None,
) -> None:
    """Mark this request's answer as replayable (no-op outside the fast lane). With ``served``
    (the cache key the body is of) and ``rekey`` (the route's key for this request, computed
    again), the answer is also revalidated after a commit instead of answered through the app
    (:meth:`FastLane._revalidate`). ``valid``: replayed only while it answers True (the read
    cache's check that no newer build of the answer's family came in: a previous version served
    while its newer one built is replayed until then, not until the next commit)."""
    marker = scope.get(SCOPE_KEY)
    if marker is not None:
        marker.ok = True
        marker.valid = valid
        if served is not None and rekey is not None:
            marker.served, marker.rekey = served, rekey


@dataclass
class _Entry:
    stamp: Hashable
    start: Message
    body: Message
    size: int
    served: Hashable | None = None  # the cache key the body is of, when it may be revalidated
    rekey: Rekey | None = None
    valid: Valid | None = None


class SqliteGeneration:
    """``PRAGMA data_version`` of a SQLite file, on a connection of its own (never written).

    Opened on first use and again after :meth:`aclose` (an app may be started and stopped more
    than once, as tests do); an error answers None, which closes the lane for that request.
    """

    def __init__(self, path: str) -> None:
        self._uri = f"{Path(path).resolve().as_uri()}?mode=ro"
        self._conn: sqlite3.Connection | None = None
        self._opened = 0
        self._lock = threading.Lock()

    async def __call__(self) -> Hashable | None:
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = sqlite3.connect(
                        self._uri, uri=True, check_same_thread=False, isolation_level=None
                    )
                    self._opened += 1
                # the value is the connection's own: a new one may repeat an old number
                return (self._opened, self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                log.warning("fast lane: no data_version from SQLite", exc_info=True)
                self._close()
                return None

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def aclose(self) -> None:
        with self._lock:
            self._close()


class PostgresGeneration:
    """The server's current snapshot, one async query shared by the requests waiting for it.

    A request may use a query's answer only if the query started after the request arrived
    (else a commit between the query's start and the request's arrival could be missed), so a
    request arriving during a query waits for the next one; at most one query runs at a time.
    A failed query answers None (no fast lane for that request); the next try reconnects, a
    second later at the earliest.
    """

    def __init__(self, url: str) -> None:
        from normfree.storage.async_reads import conninfo

        self._conninfo = conninfo(url)
        self._conn: Any = None
        self._next: asyncio.Future[Hashable | None] | None = None
        self._running = False
        self._driver: asyncio.Future[None] | None = None
        self._unsupported = False
        self._retry_at = 0.0

    async def _query(self) -> Hashable | None:
        import psycopg

        if self._unsupported or time.monotonic() < self._retry_at:
            return None
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(
                    autocommit=True, **self._conninfo
                )
            cur = await self._conn.execute("SELECT pg_current_snapshot()::text")
            row = await cur.fetchone()
            return row[0] if row else None
        except psycopg.errors.UndefinedFunction:  # PostgreSQL before 13: no lane, ever
            self._unsupported = True
            return None
        except Exception:  # the lane is an optimisation: the usual path still answers
            log.warning("fast lane: no snapshot from PostgreSQL; retrying in 1 s", exc_info=True)
            self._retry_at = time.monotonic() + 1.0  # no reconnect per request while it is down
            if self._conn is not None:
                await self._conn.close()
            self._conn = None
            return None

    async def __call__(self) -> Hashable | None:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        mine = self._next
        if not self._running:
            self._running = True
            self._driver = asyncio.ensure_future(self._drive())
        return await mine

    async def _drive(self) -> None:
        """Run queries back to back while requests wait, each for the ones that came before
        it started."""
        try:
            while self._next is not None:
                batch, self._next = self._next, None
                batch.set_result(await self._query())
        finally:
            self._running = False

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            await conn.close()


# How the lane's LISTEN connection names itself in ``pg_stat_activity``.
APPLICATION_NAME = "normfree-fast-lane"


class PostgresNotifyGeneration:
    """A count of the database's commit notices (migration 0014), kept on a LISTEN connection,
    and of this process's own commits.

    Why: :class:`PostgresGeneration` makes every request wait for a round trip taken after it
    arrived; under a writer and 32 readers on two cores that wait was 5-10 ms of a read's p99
    and its queries ran back to back (bench/results/live_reads.md). Here a request reads the
    count from memory. Every table's trigger notifies on commit (never for a rollback or a
    read-only transaction, so unlike the snapshot it does not move for other databases on the
    same server), and the count moves when this event loop reads the notice: an answer may miss
    a commit made in the last few milliseconds, never one older (bench: at most one commit
    behind), and never one this process made (``storage.db.local_commits``, counted when the
    commit returns: a GET right after this server's own write sees it). Each connection is a
    new series (``(opened, count, local)``), so nothing stamped before a reconnect is replayed
    after it; while the connection is down the lane is closed (None).

    A database without the triggers (not migrated to 0014) falls back to the snapshot, for good.
    A ping every :attr:`PING_S` finds a connection that died silently.
    """

    PING_S = 5.0
    RETRY_S = 1.0

    def __init__(self, url: str) -> None:
        from normfree.storage.async_reads import conninfo

        self._url = url
        self._conninfo = conninfo(url)
        self._conn: Any = None
        self._reader: asyncio.Future[None] | None = None
        self._opened = 0
        self.count = 0  # notices read on the current connection
        self._retry_at = 0.0
        self._connecting: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fallback: PostgresGeneration | None = None

    def _listening(self) -> bool:
        # a reader of another (stopped) event loop hears nothing here: an app started again
        return (
            self._reader is not None
            and not self._reader.done()
            and self._loop is asyncio.get_running_loop()
        )

    async def __call__(self) -> Hashable | None:
        if self.fallback is not None:
            return await self.fallback()
        if not self._listening():
            if time.monotonic() < self._retry_at:
                return None
            loop = asyncio.get_running_loop()
            if self._connecting is None or self._loop is not loop:
                self._connecting, self._loop = asyncio.Lock(), loop
            async with self._connecting:  # the requests of one moment share one connect
                if not self._listening():
                    await self._listen()
            if self.fallback is not None:
                return await self.fallback()
            if not self._listening():
                return None
        return (self._opened, self.count, local_commits())

    async def _listen(self) -> None:
        import psycopg

        from normfree.storage.generation import CHANNEL, MISSING_SQL

        await self._close()
        try:
            conn = await psycopg.AsyncConnection.connect(
                autocommit=True, application_name=APPLICATION_NAME, **self._conninfo
            )
            try:
                missing = await (await conn.execute(MISSING_SQL)).fetchall()
                if missing:
                    log.info(
                        "fast lane: %d table(s) without commit notices (%s...; a database not "
                        "migrated to revision 0014): reading the snapshot instead",
                        len(missing),
                        missing[0][0],
                    )
                    self.fallback = PostgresGeneration(self._url)
                    await conn.close()
                    return
                await conn.execute(f"LISTEN {CHANNEL}")
            except BaseException:
                await conn.close()
                raise
        except Exception:  # the lane is an optimisation: the usual path still answers
            log.warning("fast lane: cannot LISTEN on PostgreSQL; retrying in 1 s", exc_info=True)
            self._retry_at = time.monotonic() + self.RETRY_S
            return
        self._conn = conn
        self._opened += 1
        self.count = 0
        self._reader = asyncio.ensure_future(self._read(conn))

    async def _read(self, conn: Any) -> None:
        """Count notices as they come; ping between quiet spells (psycopg keeps a notice that
        arrives during the ping for the next ``notifies()``)."""
        try:
            while True:
                async for _ in conn.notifies(timeout=self.PING_S):
                    self.count += 1
                await asyncio.wait_for(conn.execute("SELECT 1"), self.PING_S)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("fast lane: lost the LISTEN connection; reconnecting", exc_info=True)
            self._retry_at = time.monotonic() + self.RETRY_S

    async def _close(self) -> None:
        reader, self._reader = self._reader, None
        if (
            reader is not None
            and not reader.done()
            and reader.get_loop() is asyncio.get_running_loop()
        ):
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            with contextlib.suppress(Exception):
                await conn.close()

    async def aclose(self) -> None:
        await self._close()
        if self.fallback is not None:
            await self.fallback.aclose()
            self.fallback = None


Generation = Callable[[], Awaitable[Hashable | None]]
# A direct route: the request's scope and its path's match -> the answer (an ASGI app, such as
# a Starlette Response), or None to let the app answer.
Direct = Callable[[Scope, "re.Match[str]"], Awaitable[ASGIApp | None]]


class FastLane:
    """ASGI middleware: replay a marked answer while its (generation, local epoch) holds."""

    def __init__(
        self,
        app: ASGIApp,
        generation: Generation | None,
        local: Callable[[], Hashable] = lambda: None,
        enabled: Callable[[], bool] = lambda: True,
        max_bytes: int = 64 * 1024 * 1024,
        direct: Sequence[tuple[re.Pattern[str], Direct]] = (),
    ) -> None:
        self.app = app
        self.direct = tuple(direct)
        self.generation = generation
        self.local = local
        self.enabled = enabled
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[Hashable, tuple[Hashable, asyncio.Future[None]]] = {}
        self.hits = 0  # answered from an entry
        self.shared = 0  # of which waited for the same read in flight
        self.stored = 0
        self.direct_answers = 0  # answered by a direct route
        self.revalidated = 0  # of the hits, entries of an older generation whose key held
        self.routed = 0  # lane requests answered through the app (a miss, or not replayable)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            (self.generation is None and not self.direct)
            or scope["type"] != "http"
            or scope["method"] != "GET"
            or not self.enabled()
        ):
            await self.app(scope, receive, send)
            return
        gz = False
        host = b""
        for name, value in scope["headers"]:
            if name in _SKIP:
                await self.app(scope, receive, send)
                return
            if name == b"accept-encoding" and b"gzip" in value:
                gz = True
            elif name == b"host":  # pages print absolute links from it
                host = value
        for pattern, route in self.direct:
            match = pattern.fullmatch(scope["path"])
            if match is not None:
                answer = await route(scope, match)
                if answer is None:
                    break
                self.direct_answers += 1
                await answer(scope, receive, send)
                return
        if self.generation is None:
            await self.app(scope, receive, send)
            return
        generation = await self.generation()
        if generation is None:
            await self.app(scope, receive, send)
            return
        GENERATION.set((id(self), generation))
        stamp = (generation, self.local())
        key = (scope["path"], scope["query_string"], gz, host, scope.get("scheme"))
        if await self._replay(key, stamp, send):
            return
        if await self._revalidate(key, stamp, send):
            return
        pending = self._inflight.get(key)
        if pending is not None and pending[0] == stamp:
            # the same read at the same generation is on its way through the app: its answer
            # is this request's too (at a miss, 32 clients would otherwise all take the slow
            # path at once, each queueing for the thread pool)
            # but never for long: a rebuild may take seconds, and the route then answers at
            # once with the read's previous version (api.cache), which the lane cannot
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pending[1]), SHARE_WAIT_S)
            if await self._replay(key, stamp, send):
                self.shared += 1
                return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if pending is None or pending[0] != stamp:
            self._inflight[key] = (stamp, done)
        self.routed += 1
        try:
            await self._through(scope, receive, send, key, stamp)
        finally:
            done.set_result(None)
            if self._inflight.get(key, (None, None))[1] is done:
                del self._inflight[key]

    async def _replay(self, key: Hashable, stamp: Hashable, send: Send) -> bool:
        entry = self._entries.get(key)
        if entry is None or entry.stamp != stamp or (entry.valid is not None and not entry.valid()):
            return False
        self._entries.move_to_end(key)
        self.hits += 1
        await send(entry.start)
        await send(entry.body)
        return True

    async def _revalidate(self, key: Hashable, stamp: Hashable, send: Send) -> bool:
        """Replay an entry of an older generation if its route's key for this request is still
        the key its body is of: the commit did not touch what it shows.

        Why: a writer commits ~10 times a second (a lease and a finish per trial), and after
        each commit every page went through routing, dependencies and the response's making
        once more, though one commit moves one study of many: 78% of a server's event loop
        under 32 readers at 10k trials went there (bench/results/live_reads.md). The key is
        computed again (its version reads, kept per generation by ``api.reads``) and nothing
        else. Exact as the route is: the key holds every version the answer depends on, and
        the process's local epoch (analyses, lines) and the answer's family's builds must not
        have moved."""
        entry = self._entries.get(key)
        if (
            entry is None
            or entry.rekey is None
            or entry.stamp[1] != stamp[1]  # type: ignore[index]
            or (entry.valid is not None and not entry.valid())
        ):
            return False
        try:
            current = await entry.rekey()
        except Exception:  # gone, unreadable: the app answers it the usual way
            return False
        if current != entry.served:
            return False
        entry.stamp = stamp
        self.revalidated += 1
        return await self._replay(key, stamp, send)

    async def _through(
        self, scope: Scope, receive: Receive, send: Send, key: Hashable, stamp: Hashable
    ) -> None:
        """Answer through the app, keeping a marked fresh 200 for replay."""
        marker = scope[SCOPE_KEY] = _Marker()
        start: Message | None = None
        parts: list[bytes] = []
        complete = False

        async def capture(message: Message) -> None:
            nonlocal start, complete
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                complete = not message.get("more_body", False)
            await send(message)

        await self.app(scope, receive, capture)
        if marker.ok and complete and start is not None and start["status"] == 200:
            body = b"".join(parts)
            message = {"type": "http.response.body", "body": body}
            entry = _Entry(
                stamp, start, message, len(body), marker.served, marker.rekey, marker.valid
            )
            self._store(key, entry)

    def _store(self, key: Hashable, entry: _Entry) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        if entry.size > self.max_bytes // 8:
            return
        self._entries[key] = entry
        self._bytes += entry.size
        self.stored += 1
        while self._bytes > self.max_bytes:
            _k, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.size


def of(app: Any) -> FastLane | None:
    """The app's FastLane instance, or None (Starlette builds its middleware stack on first
    use, so before any request there is none)."""
    node = getattr(app, "middleware_stack", None)
    while node is not None and not isinstance(node, FastLane):
        node = getattr(node, "app", None)
    return node


def generation_for(url: str) -> SqliteGeneration | PostgresNotifyGeneration | None:
    """The generation source for a database URL; None where there is none (an in-memory
    SQLite database, another backend): the lane then stays closed."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        path = u.database
        if not path or path == ":memory:" or u.query.get("mode") == "memory":
            return None
        if not Path(path).exists():
            return None
        return SqliteGeneration(path)
    if u.get_backend_name() == "postgresql":
        return PostgresNotifyGeneration(url)
    return None
