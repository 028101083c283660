"""Reads whose cost must not grow with the trials stored: one study's rows, pages, stamps.

``Repository`` owns writes and whole-entity reads; these are the narrow reads the API serves at
scale. Each touches one study's rows through ``ix_trials_study_status`` (bounded by the study's
size, not the database's) or one row by primary key, and selects only the columns it shows.
They take a Core connection from ``Database.read()`` so that one request's few reads share one
snapshot and none pays for an ORM session.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from normfree.specs import TRIAL_STATUSES
from normfree.storage import aggregates
from normfree.storage._common import _trial_dict
from normfree.storage.models import (
    ArmResultRow,
    ReadVersionRow,
    StudyRow,
    TrialDiagnosticRow,
    TrialMetricRow,
    TrialRow,
    UTCDateTime,
)

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
    "reused_from",
)
_COLUMN = {"value": "objective_value"}
MAX_PAGE = 1000


def study_counts(conn: Any, study_id: int) -> dict[str, int]:
    """Trials of the study per status (every status, zeros included): an index-only count."""
    counts = dict.fromkeys(TRIAL_STATUSES, 0)
    q = (
        sa.select(TrialRow.status, sa.func.count())
        .where(TrialRow.study_id == study_id)
        .group_by(TrialRow.status)
    )
    for status, n in conn.execute(q):
        counts[status] = int(n)
    return counts


def study_reused(conn: Any, study_id: int) -> int:
    """How many of the study's trials carry an earlier study's result (``reused_from``)."""
    q = sa.select(sa.func.count()).where(
        TrialRow.study_id == study_id, TrialRow.reused_from.is_not(None)
    )
    return int(conn.execute(q).scalar() or 0)


def recent_study_ids(conn: Any, limit: int) -> list[int]:
    """The ``limit`` studies updated last (archived ones left out): those a server warms."""
    rows = conn.execute(
        sa.select(StudyRow.id)
        .where(StudyRow.archived_at.is_(None))
        .order_by(StudyRow.updated_at.desc(), StudyRow.id.desc())
        .limit(limit)
    )
    return [int(i) for (i,) in rows]


@functools.cache
def _stamp_query() -> Any:
    """The study row beside its trials' counts per status, one statement built once: a study's
    key is read again after every commit under a writer, and building three statements per
    read (two queries) was a fifth of the event loop's time there (bench/results/live_reads.md)."""
    t = TrialRow.__table__
    counts = (
        sa.select(t.c.status, sa.func.count().label("n"))
        .where(t.c.study_id == sa.bindparam("sid"))
        .group_by(t.c.status)
        .subquery()
    )
    return (
        sa.select(StudyRow.status, StudyRow.updated_at, counts.c.status, counts.c.n)
        .join_from(StudyRow.__table__, counts, sa.true(), isouter=True)
        .where(StudyRow.id == sa.bindparam("sid"))
    )


def study_stamp(conn: Any, study_id: int) -> tuple[Any, ...] | None:
    """(status, updated_at, per-status counts) of a study: what its summary depends on (see
    ``api.services.study_key``). None when there is no such study."""
    rows = conn.execute(_stamp_query(), {"sid": study_id}).all()
    if not rows:
        return None
    counts = dict.fromkeys(TRIAL_STATUSES, 0)
    for _status, _updated, trial_status, n in rows:
        if trial_status is not None:
            counts[trial_status] = int(n)
    status, updated = rows[0][0], rows[0][1]
    return (status, updated.isoformat(), tuple(sorted(counts.items())))


def _columns(fields: Iterable[str]) -> list[Any]:
    names = ["id", *(f for f in fields if f != "id")]
    return [getattr(TrialRow, _COLUMN.get(f, f)).label(f) for f in names]


def _plain_rows(result: Any) -> list[dict[str, Any]]:
    """A result's rows as dicts, timestamps as ISO text. The column names are read once, not
    per row: a study's 1,000 rows spent most of their summary's build in ``row._mapping``."""
    keys = list(result.keys())
    rows = [dict(zip(keys, r, strict=True)) for r in result]
    for r in rows:
        for k, v in r.items():
            if isinstance(v, datetime):
                r[k] = v.isoformat()
    return rows


def study_trial_rows(
    conn: Any,
    study_id: int,
    fields: Sequence[str] = TRIAL_LIST_FIELDS,
    *,
    since: datetime | None = None,
) -> list[dict[str, Any]]:
    """Every trial of one study, by id, with only ``fields`` (for its cells); with ``since``,
    only those written at or after it (``api.study_rows`` keeps the rest)."""
    q = sa.select(*_columns(fields)).where(TrialRow.study_id == study_id).order_by(TrialRow.id)
    if since is not None:
        q = q.where(TrialRow.updated_at >= since)
    return _plain_rows(conn.execute(q))


def trial_page(
    conn: Any,
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
    rows = _plain_rows(conn.execute(q))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1]["id"] if more and rows else None)


@functools.cache
def _trial_queries() -> tuple[Any, Any, Any, Any]:
    """A trial's queries, built once with a bound id: building a statement per call
    (SQLAlchemy's coercions and cache key) cost as much as running it."""
    t, m, d = TrialRow.__table__, TrialMetricRow.__table__, TrialDiagnosticRow.__table__
    tid = sa.bindparam("tid")
    rest = [c for c in t.c if c.name != "document"]
    return (
        sa.select(t.c.status, t.c.updated_at, t.c.document).where(t.c.id == tid),
        sa.select(*rest).where(t.c.id == tid),
        sa.select(m).where(m.c.trial_id == tid).order_by(m.c.epoch),
        sa.select(d).where(d.c.trial_id == tid).order_by(d.c.epoch, d.c.layer),
    )


def trial_detail(conn: Any, trial_id: int) -> dict[str, Any] | None:
    """One trial with ``curves`` (per epoch), ``diagnostics`` (per epoch and layer) and
    ``updated_at`` (its stamp, with ``status``). None: no such trial.

    A finished trial's stored document (``TrialRow.document``) when its stamp is the row's:
    one row read, whatever the trial's curves and diagnostics hold. Otherwise (a trial still
    running, or finished before documents were stored) it is built by :func:`build_trial_detail`.
    """
    found, doc = stored_trial_detail(conn, trial_id)
    if not found:
        return None
    return doc if doc is not None else build_trial_detail(conn, trial_id)


def stored_trial_detail(
    conn: Any, trial_id: int, *, finite: bool = False
) -> tuple[bool, dict[str, Any] | None]:
    """(whether the trial exists, its stored document if that is current): one statement, so
    it may run outside a transaction (``Database.read_one``). ``finite``: as
    :func:`current_document`."""
    row = conn.execute(trial_stamp_query(), {"tid": trial_id}).first()
    if row is None:
        return False, None
    return True, current_document(row.status, row.updated_at, row.document, finite=finite)


def trial_stamp_query() -> Any:
    """A trial's status, ``updated_at`` and stored document, by id (bound as ``tid``)."""
    return _trial_queries()[0]


def trial_stamps_query() -> Any:
    """PostgreSQL: :func:`trial_stamp_query` for many trials at once, each row led by its id
    (the ids bound as the array ``ids``)."""
    from sqlalchemy.dialects.postgresql import ARRAY

    t = TrialRow.__table__
    ids = sa.bindparam("ids", type_=ARRAY(sa.Integer))
    return sa.select(t.c.id, t.c.status, t.c.updated_at, t.c.document).where(t.c.id == sa.any_(ids))


def current_document(
    status: str, updated_at: datetime, document: str | None, *, finite: bool = False
) -> dict | None:
    """The stored document of a trial row with this status and ``updated_at``, if it is the
    row's current one (its own stamp is the row's): else None.

    ``finite``: its NaN and infinities read as None, as every API answer shows them
    (``jsonsafe.finite``), while it is parsed: the API's trial reads then skip a walk over
    every curve point, 30% of rendering a trial (bench/results/live_reads.md). The document is
    ``json.dumps`` output, whose only non-finite numbers are those constants."""
    if document is None:
        return None
    try:
        doc = json.loads(document, parse_constant=_none) if finite else json.loads(document)
    except ValueError:  # a corrupt copy: the trial's rows still hold the truth
        doc = None
    if not isinstance(doc, dict):
        return None
    stamp = UTCDateTime().process_result_value(updated_at, None)
    if doc.get("updated_at") == stamp.isoformat() and doc.get("status") == status:
        return doc
    return None


def _none(_constant: str) -> None:
    return None


def build_trial_detail(conn: Any, trial_id: int) -> dict[str, Any] | None:
    """:func:`trial_detail` from the trial's rows: three Core queries by key, not an ORM load
    (building ORM objects cost several times the queries: bench/bench_read_scale.py)."""
    _stamp, one, metrics, diags = _trial_queries()
    bound = {"tid": trial_id}
    row = conn.execute(one, bound).first()
    if row is None:
        return None
    curves = conn.execute(metrics, bound).all()
    diagnostics = conn.execute(diags, bound).all()
    out = _trial_dict(row, details=True, curves=curves, diagnostics=diagnostics)
    out["updated_at"] = row.updated_at.isoformat()
    return out


def store_trial_document(conn: Any, trial_id: int) -> None:
    """Store a trial's document (:func:`trial_detail`), built from its rows as they now are.

    Called in the transaction that finishes the trial, after its curves and diagnostics are
    written. ``updated_at`` is written back unchanged: its ``onupdate`` would otherwise move
    the stamp the document carries."""
    doc = build_trial_detail(conn, trial_id)
    if doc is None:
        return
    t = TrialRow.__table__
    conn.execute(
        sa.update(t)
        .where(t.c.id == trial_id)
        .values(document=json.dumps(doc), updated_at=t.c.updated_at)
    )


def versions(conn: Any, scopes: Iterable[str]) -> dict[str, int]:
    """The read versions of ``scopes`` (``storage.aggregates.read_versions``) in one query."""
    return aggregates.read_versions(conn, scopes)


def versions_with_proxies(conn: Any, scopes: Iterable[str]) -> dict[str, int]:
    """The read versions of ``scopes`` and of every proxy's leaderboard (``proxy:<name>``), in
    one query: for a read that shows rows of every board (a candidate's results)."""
    v = ReadVersionRow.__table__
    wanted = sorted(set(scopes))
    q = sa.select(v.c.scope, v.c.version).where(
        sa.or_(v.c.scope.in_(wanted), v.c.scope.like("proxy:%"))
    )
    found = {str(s): int(n) for s, n in conn.execute(q)}
    return {**{s: 0 for s in wanted}, **found}


def arm_candidates(conn: Any) -> list[tuple[str, str]]:
    """Every (proxy, candidate name) with finished trials, from the arm summaries."""
    a = ArmResultRow.__table__
    q = sa.select(a.c.proxy, a.c.candidate).distinct().order_by(a.c.proxy, a.c.candidate)
    return [(p, c) for p, c in conn.execute(q)]
