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
    and the next read opens another (not before ``retry_s`` after a failure to connect)."""

    def __init__(self, url: str, size: int = 2, retry_s: float = 1.0) -> None:
        from sqlalchemy.dialects import postgresql

        self._conninfo = conninfo(url)
        self._size = size
        self._retry_s = retry_s
        self._idle: list[Any] = []
        self._opened = 0
        self._free: asyncio.Condition | None = None
        self._retry_at = 0.0
        stamp = reads.trial_stamp_query()
        self._sql = str(stamp.compile(dialect=postgresql.psycopg.dialect()))

    async def stored_trial_detail(self, trial_id: int) -> tuple[bool, dict[str, Any] | None]:
        """As :func:`.reads.stored_trial_detail`; raises whatever the driver raises."""
        conn = await self._acquire()
        try:
            cur = await conn.execute(self._sql, {"tid": trial_id})
            row = await cur.fetchone()
        except BaseException:
            await self._discard(conn)
            raise
        await self._release(conn)
        if row is None:
            return False, None
        status, updated_at, document = row
        return True, reads.current_document(status, updated_at, document)

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
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()
        self._opened -= len(idle)
