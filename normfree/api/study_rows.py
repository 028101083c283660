"""A study's trial rows for its cells, read whole once per process and then only as written.

Why: a live study's cells (and its page, best arm and reliability) are rebuilt at every commit
of its writer, five a second (issue 27), and reading the study's 1,000 rows through the ORM's
types was 16 ms of a 40 ms rebuild on a 2-core host, while one commit changes one row. So each
process keeps the rows it read, per study, and a rebuild reads only the rows whose
``updated_at`` is at or after the newest it holds, less ``MARGIN`` (a writer's clock may lag
the newest stamp a little; every trial write moves ``updated_at``, ``storage.models``).

Never wrong for long: the rows held are checked against the study's per-status counts, read in
the same transaction (an index-only count); any difference (a write missed by more than the
margin, a deleted trial) reads the study whole again.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from datetime import datetime, timedelta
from typing import Any

from normfree.storage import reads

MARGIN = timedelta(seconds=5)
MAX_STUDIES = 64  # studies held per process (LRU); a study's rows are ~1 kB each


class _Held:
    def __init__(self, rows: dict[int, dict[str, Any]]) -> None:
        self.rows = rows
        self.lock = threading.Lock()  # one rebuild of a study merges at a time


_HELD: OrderedDict[tuple[Any, ...], _Held] = OrderedDict()
_LOCK = threading.Lock()


def rows(conn: Any, db_url: str, study_id: int, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every trial of ``study_id`` with ``fields`` (as ``reads.study_trial_rows``, by id), read
    in ``conn``'s transaction. The dicts are the ones held, shared with every later caller:
    read-only (a merge replaces a row's dict, never changes one). Copying 1,000 of them was
    a quarter of a live study's rebuild."""
    wanted = tuple(dict.fromkeys((*fields, "id", "updated_at")))
    key = (db_url, study_id, wanted)
    with _LOCK:
        held = _HELD.get(key)
        if held is not None:
            _HELD.move_to_end(key)
    if held is None:
        held = _Held({})
    with held.lock:
        if held.rows:
            newest = max(r["updated_at"] for r in held.rows.values())
            since = datetime.fromisoformat(newest) - MARGIN
            for r in reads.study_trial_rows(conn, study_id, wanted, since=since):
                held.rows[r["id"]] = r
        counts = {s: n for s, n in reads.study_counts(conn, study_id).items() if n}
        if not held.rows or Counter(r["status"] for r in held.rows.values()) != counts:
            held.rows = {r["id"]: r for r in reads.study_trial_rows(conn, study_id, wanted)}
        out = [held.rows[i] for i in sorted(held.rows)]
    with _LOCK:
        _HELD[key] = held
        _HELD.move_to_end(key)
        while len(_HELD) > MAX_STUDIES:
            _HELD.popitem(last=False)
    return out


def forget(db_url: str | None = None) -> None:
    """Drop the rows held (of one database, or all): tests, and a database replaced in place."""
    with _LOCK:
        for key in [k for k in _HELD if db_url is None or k[0] == db_url]:
            del _HELD[key]
