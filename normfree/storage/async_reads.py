"""A finished trial's stored document, read on the event loop (PostgreSQL, psycopg's async API).

Why: a trial is read at random among 100k, so nothing cached helps it, and on PostgreSQL the
synchronous read (SQLAlchemy, psycopg, a hand-off to a thread and back) cost 1.4-1.9 ms of the
API's CPU per read against 0.7 ms on SQLite, which reads on the loop (bench/results/
read_scale.md). Here the one statement of :func:`.reads.stored_trial_detail` runs on a few
async connections in autocommit: no thread, no transaction, no SQLAlchemy per read. Same
statement (compiled once from the same SQLAlchemy query), same stamp check (:func:`.reads.
current_document`); a trial without a current document, and any failure, is the caller's to read
the usual way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from normfree.storage import reads


def conninfo(url: str) -> dict[str, str]:
    """psycopg's connection keywords for a SQLAlchemy PostgreSQL URL."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    info = {
        "host": u.host,
        "port": u.port,
        "user": u.username,
        "password": u.password,
        "dbname": u.database,
        **{k: str(v) for k, v in u.query.items()},
    }
    return {k: str(v) for k, v in info.items() if v is not None}


class AsyncTrialDocuments:
    """Up to ``size`` async connections, opened on first use and kept; a broken one is dropped
    and the next read opens another (not before ``retry_s`` after a failure to connect).

    Reads that arrive while a query is in flight are sent together, as one statement
    (``WHERE id = ANY(...)``), when a connection is free. Why: psycopg's work per statement
    (sending, waiting, the result's set-up), not the rows, was 46% of a trial read's CPU on the
    event loop, and trial reads were 41% of that loop under 32 readers and a writer
    (bench/results/live_reads.md); a batch pays it once for every read that waited.
    """

    # At most this many ids in one statement (a burst beyond it takes the next one).
    MAX_BATCH = 64

    def __init__(self, url: str, size: int = 2, retry_s: float = 1.0) -> None:
        from sqlalchemy.dialects import postgresql

        self._conninfo = conninfo(url)
        self._size = size
        self._retry_s = retry_s
        self._idle: list[Any] = []
        self._opened = 0
        self._free: asyncio.Condition | None = None
        self._retry_at = 0.0
        self._waiting: dict[int, list[asyncio.Future[tuple[bool, dict[str, Any] | None]]]] = {}
        self._drivers: set[asyncio.Future[None]] = set()
        self.statements = 0  # sent so far (tests: reads were batched)
        stamps = reads.trial_stamps_query()
        self._sql = str(stamps.compile(dialect=postgresql.psycopg.dialect()))

    async def stored_trial_detail(self, trial_id: int) -> tuple[bool, dict[str, Any] | None]:
        """As :func:`.reads.stored_trial_detail` with ``finite=True`` (what the API shows);
        raises whatever the driver raises."""
        fut: asyncio.Future[tuple[bool, dict[str, Any] | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting.setdefault(trial_id, []).append(fut)
        if len(self._drivers) < self._size:
            driver = asyncio.ensure_future(self._drive())
            self._drivers.add(driver)
            driver.add_done_callback(self._drivers.discard)
        return await fut

    async def _drive(self) -> None:
        """Send the reads waiting now as one statement, again while more are waiting."""
        while self._waiting:
            conn = await self._acquire_or_fail()
            if conn is None:
                continue
            ids = list(self._waiting)[: self.MAX_BATCH]
            if not ids:  # another driver took them while this one waited for a connection
                await self._release(conn)
                continue
            batch = {i: self._waiting.pop(i) for i in ids}
            try:
                self.statements += 1
                cur = await conn.execute(self._sql, {"ids": ids})
                rows = await cur.fetchall()
            except BaseException as exc:
                await self._discard(conn)
                _fail(batch, exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            await self._release(conn)
            found = {row[0]: row[1:] for row in rows}
            for tid, futs in batch.items():
                row = found.get(tid)
                answer = (
                    (False, None)
                    if row is None
                    else (True, reads.current_document(*row, finite=True))
                )
                for fut in futs:
                    if not fut.done():
                        fut.set_result(answer)

    async def _acquire_or_fail(self) -> Any:
        """A connection, or None after failing the waiting reads (no connection to be had)."""
        try:
            return await self._acquire()
        except BaseException as exc:
            batch, self._waiting = self._waiting, {}
            _fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return None

    async def _acquire(self) -> Any:
        import psycopg

        if self._free is None:
            self._free = asyncio.Condition()
        async with self._free:
            while not self._idle and self._opened >= self._size:
                await self._free.wait()
            if self._idle:
                return self._idle.pop()
            if time.monotonic() < self._retry_at:
                raise ConnectionError("PostgreSQL was unreachable a moment ago")
            self._opened += 1
        try:
            return await psycopg.AsyncConnection.connect(autocommit=True, **self._conninfo)
        except BaseException:
            self._retry_at = time.monotonic() + self._retry_s
            await self._discard(None)
            raise

    async def _release(self, conn: Any) -> None:
        assert self._free is not None
        async with self._free:
            self._idle.append(conn)
            self._free.notify()

    async def _discard(self, conn: Any) -> None:
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
        assert self._free is not None
        async with self._free:
            self._opened -= 1
            self._free.notify()

    async def aclose(self) -> None:
        for driver in list(self._drivers):  # a read in flight fails; its connection is closed
            driver.cancel()
            with contextlib.suppress(BaseException):
                await driver
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()
        self._opened -= len(idle)


def _fail(batch: dict[int, list[asyncio.Future[Any]]], exc: BaseException) -> None:
    for futs in batch.values():
        for fut in futs:
            if not fut.done():
                fut.set_exception(exc)
