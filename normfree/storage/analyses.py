"""Function analyses kept across restarts: what ``api.enrich`` would otherwise redo at each start.

A leaderboard arm named by a transform call has its group and properties computed by
``search_space.catalog.describe``, 50-300 ms of sympy per name; a property study has hundreds of
names. Kept only in memory, a server analysed them all again after every start, and each one it
finished moved the boards' cache keys: at 10k trials the first minute after a start answered
reads ~1.4x slower and up to 5 commits behind (bench/results/live_reads.md). Stored here per
catalog code version (``workers.versions.catalog_version``), a start adopts them at once.

An analysis is deterministic for a name under one version, so a row is written once and never
updated: two processes storing the same name keep the first (INSERT ... ON CONFLICT DO NOTHING).
Rows of older versions are left in place (a few kilobytes per study) rather than deleted on
read: a server of the previous version may still be running beside a new one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from normfree.storage.db import Database
from normfree.storage.models import FunctionAnalysisRow, utcnow

# (group, properties), or None for a name that is not a catalog function
Info = tuple[str, dict[str, Any]] | None
_CHUNK = 200  # rows per INSERT (SQLite's bound-parameter limit is 32,766; 4 columns each)


def _encode(info: Info) -> str | None:
    # json, not a JSON column: a property may be +-inf (JSON columns refuse it; Python's json
    # writes and reads it back exactly, as it does every float)
    return None if info is None else json.dumps([info[0], info[1]])


def _decode(text: str | None) -> Info:
    if text is None:
        return None
    group, props = json.loads(text)
    return str(group), dict(props)


def load(db: Database, version: str) -> list[tuple[str, Info]]:
    """Every analysis stored under ``version``, by name."""
    table = FunctionAnalysisRow.__table__
    with db.read() as conn:
        rows = conn.execute(
            select(table.c.name, table.c.info)
            .where(table.c.version == version)
            .order_by(table.c.name)
        ).all()
    return [(str(name), _decode(info)) for name, info in rows]


def save(db: Database, version: str, items: Iterable[tuple[str, Info]]) -> int:
    """Store analyses made under ``version`` (names already stored keep their row); how many
    were offered. Names longer than the column (not an arm's name) are skipped."""
    rows = [
        {"version": version, "name": name, "info": _encode(info), "created_at": utcnow()}
        for name, info in items
        if len(name) <= 200
    ]
    if not rows:
        return 0
    insert = pg_insert if db.is_postgres else sqlite_insert
    with db.session() as s:
        for i in range(0, len(rows), _CHUNK):
            stmt = insert(FunctionAnalysisRow).values(rows[i : i + _CHUNK])
            s.execute(stmt.on_conflict_do_nothing(index_elements=["version", "name"]))
    return len(rows)


__all__ = ["Info", "load", "save"]
