"""Reads whose cost must not grow with the trials stored: one study's rows, pages, stamps.

``Repository`` owns writes and whole-entity reads; these are the narrow reads the API serves at
scale. Each touches one study's rows through ``ix_trials_study_status`` (bounded by the study's
size, not the database's) or one row by primary key, and selects only the columns it shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from normfree.storage import aggregates
from normfree.storage.models import TRIAL_STATUSES, TrialRow

# Columns of a trial in a study's table (``fields=`` picks among them; ``id`` always comes).
TRIAL_LIST_FIELDS = (
    "id",
    "candidate",
    "seed",
    "status",
    "attempt",
    "axis_values",
    "objective",
    "direction",
    "value",
    "finished_at",
)
_COLUMN = {"value": "objective_value"}
MAX_PAGE = 1000


def study_counts(db: Any, study_id: int) -> dict[str, int]:
    """Trials of the study per status (every status, zeros included): an index-only count."""
    counts = dict.fromkeys(TRIAL_STATUSES, 0)
    q = (
        sa.select(TrialRow.status, sa.func.count())
        .where(TrialRow.study_id == study_id)
        .group_by(TrialRow.status)
    )
    with db.session(readonly=True) as s:
        for status, n in s.execute(q):
            counts[status] = int(n)
    return counts


def _columns(fields: Iterable[str]) -> list[Any]:
    names = ["id", *(f for f in fields if f != "id")]
    return [getattr(TrialRow, _COLUMN.get(f, f)).label(f) for f in names]


def _plain(row: Any) -> dict[str, Any]:
    out = dict(row._mapping)
    for k, v in out.items():
        if isinstance(v, datetime):
            out[k] = v.isoformat()
    return out


def study_trial_rows(
    db: Any, study_id: int, fields: Sequence[str] = TRIAL_LIST_FIELDS
) -> list[dict[str, Any]]:
    """Every trial of one study, by id, with only ``fields`` (for its cells)."""
    q = sa.select(*_columns(fields)).where(TrialRow.study_id == study_id).order_by(TrialRow.id)
    with db.session(readonly=True) as s:
        return [_plain(r) for r in s.execute(q)]


def trial_page(
    db: Any,
    study_id: int,
    *,
    after: int = 0,
    limit: int = 100,
    fields: Sequence[str] = TRIAL_LIST_FIELDS,
    status: Sequence[str] | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of a study's trials in id order after trial ``after``; and the next cursor.

    Keyset pagination on the id, which never changes: a trial finishing (or being added) while a
    client pages cannot shift rows between pages, so no row is returned twice or skipped. The
    next cursor is None on the last page.
    """
    limit = max(1, min(int(limit), MAX_PAGE))
    q = (
        sa.select(*_columns(fields))
        .where(TrialRow.study_id == study_id, TrialRow.id > after)
        .order_by(TrialRow.id)
        .limit(limit + 1)
    )
    if status:
        q = q.where(TrialRow.status.in_(list(status)))
    with db.session(readonly=True) as s:
        rows = [_plain(r) for r in s.execute(q)]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1]["id"] if more and rows else None)


def trial_stamp(db: Any, trial_id: int) -> tuple[str, str] | None:
    """(status, updated_at) of a trial: every write to it changes the pair. None: no trial."""
    q = sa.select(TrialRow.status, TrialRow.updated_at).where(TrialRow.id == trial_id)
    with db.session(readonly=True) as s:
        row = s.execute(q).first()
    return None if row is None else (row.status, row.updated_at.isoformat())


def versions(db: Any, scopes: Iterable[str]) -> dict[str, int]:
    """The read versions of ``scopes`` (``storage.aggregates.read_versions``) in one query."""
    with db.session(readonly=True) as s:
        return aggregates.read_versions(s, scopes)


def arm_candidates(db: Any) -> list[tuple[str, str]]:
    """Every (proxy, candidate name) with finished trials, from the arm summaries."""
    from normfree.storage.models import ArmResultRow

    a = ArmResultRow.__table__
    q = sa.select(a.c.proxy, a.c.candidate).distinct().order_by(a.c.proxy, a.c.candidate)
    with db.session(readonly=True) as s:
        return [(p, c) for p, c in s.execute(q)]
