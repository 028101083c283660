"""Per-arm summaries of finished trials, and the read-version counters the API caches on.

Why: a leaderboard ranks arms (a config without its seed) by statistics over their seeds. Read
from scratch it loads every finished trial of a proxy, so its cost grows with every study ever
run (seconds at 10k trials). ``arm_results`` keeps, per (proxy, arm), exactly the inputs those
statistics need, folded in by the transaction that finishes a trial; a leaderboard then reads one
row per arm, however many trials and studies stand behind it.

What is kept, and why it is enough (``storage.leaderboard`` reads it):

- counts of finished trials per status (COMPLETE, DIVERGED, FAILED, PRUNED; a CANCELLED trial
  never ran and counts nowhere);
- per seed, the latest COMPLETE value (``seeds``: ``{"seed": [value, order]}``): the leaderboard
  takes one value per seed, the latest when several studies ran the same seed;
- the first finished trial's norm, axes and overrides, the first objective and the last
  direction, each with the ``order_key`` that decided it.

Every field is a first, a last, a latest-per-seed, a count or a set, so folding is independent
of the order trials are folded in: the incremental rows equal a rebuild from the trials table
(``rebuild``, which migration 0006 runs, and which the contract tests compare against).

Versions: ``read_versions`` holds one counter per cached read scope (``proxy:<name>`` for a
proxy's leaderboard, ``candidates`` for anything showing candidate rows). A write bumps the
counter in its own transaction, so a reader that sees the new counter also sees the new rows.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from normfree.specs import RUN_OUTCOME_STATUSES, arm_settings
from normfree.storage.models import ArmResultRow, ReadVersionRow, TrialRow, utcnow

# Statuses a leaderboard counts: the trial ran and ended.
FINISHED = RUN_OUTCOME_STATUSES  # the trials a board counts
_COUNTERS = {"DIVERGED": "n_diverged", "FAILED": "n_failed", "PRUNED": "n_pruned"}
# Sorts before every real time: a finished trial without a finish time (rows from before
# finished_at was always written) counts as the earliest.
_NO_TIME = "0000-00-00T00:00:00.000000"
# The columns of a finished trial that its arm's summary depends on (named, not the model: the
# migration that backfills the table runs this code against the schema of its own revision).
_TRIAL_COLUMNS = (
    "id",
    "study_id",
    "proxy",
    "arm_key",
    "context_key",
    "candidate",
    "norm",
    "axis_values",
    "config",
    "seed",
    "status",
    "objective",
    "direction",
    "objective_value",
    "finished_at",
)
_ARM_FIELDS = (
    "proxy",
    "arm_key",
    "context_key",
    "candidate",
    "first_order",
    "norm",
    "axis_values",
    "overrides",
    "objective",
    "objective_order",
    "direction",
    "direction_order",
    "n_trials",
    "n_diverged",
    "n_failed",
    "n_pruned",
    "seeds",
    "study_ids",
)


def order_key(finished_at: datetime | None, trial_id: int) -> str:
    """A string that sorts like (finish time, id): the order a leaderboard reads trials in."""
    if finished_at is None:
        stamp = _NO_TIME
    else:
        if finished_at.tzinfo is not None:
            finished_at = finished_at.astimezone(UTC)
        stamp = finished_at.strftime("%Y-%m-%dT%H:%M:%S.%f")
    return f"{stamp}|{trial_id:012d}"


def _finished_at(value: Any) -> datetime | None:
    """A finish time as read through a plain (untyped) column: SQLite hands back text."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _json(value: Any) -> Any:
    """JSON columns read through plain columns come back as text on SQLite."""
    return json.loads(value) if isinstance(value, str) else value


def fold(arm: dict[str, Any] | None, trial: Mapping[str, Any]) -> dict[str, Any]:
    """``arm`` (a summary, or None) with one more finished ``trial`` folded in (a new dict).

    ``trial`` carries the ``_TRIAL_COLUMNS``. Order-independent by construction (see the module
    docstring), so a trial may be folded whenever its transaction commits.
    """
    order = order_key(_finished_at(trial["finished_at"]), int(trial["id"]))
    config = _json(trial["config"]) or {}
    first = {
        "context_key": trial["context_key"],
        "candidate": trial["candidate"],
        "first_order": order,
        "norm": _json(trial["norm"]) or {},
        "axis_values": _json(trial["axis_values"]) or {},
        "overrides": arm_settings(config),
    }
    if arm is None:
        out: dict[str, Any] = {
            "proxy": trial["proxy"],
            "arm_key": trial["arm_key"],
            **first,
            "objective": None,
            "objective_order": None,
            "direction": None,
            "direction_order": None,
            "n_trials": 0,
            "n_diverged": 0,
            "n_failed": 0,
            "n_pruned": 0,
            "seeds": {},
            "study_ids": [],
        }
    else:
        out = {**arm, "seeds": dict(arm["seeds"] or {}), "study_ids": list(arm["study_ids"] or [])}
        if order < out["first_order"]:
            out.update(first)
    status = trial["status"]
    out["n_trials"] += 1
    if status in _COUNTERS:
        out[_COUNTERS[status]] += 1
    if trial["objective"] and (out["objective_order"] is None or order < out["objective_order"]):
        out["objective"], out["objective_order"] = trial["objective"], order
    if trial["direction"] and (out["direction_order"] is None or order > out["direction_order"]):
        out["direction"], out["direction_order"] = trial["direction"], order
    value = trial["objective_value"]
    if status == "COMPLETE" and value is not None:
        seed = str(int(trial["seed"]))
        held = out["seeds"].get(seed)
        if held is None or order > held[1]:
            out["seeds"][seed] = [float(value), order]
    study = int(trial["study_id"])
    if study not in out["study_ids"]:
        out["study_ids"] = sorted([*out["study_ids"], study])
    return out


def _trials_table(*extra: str) -> sa.TableClause:
    return sa.table("trials", *(sa.column(c) for c in (*_TRIAL_COLUMNS, *extra)))


def _arm_state(row: Any) -> dict[str, Any]:
    m = row._mapping
    return {f: m[f] for f in _ARM_FIELDS}


def _insert(dialect: str, table: Any) -> Any:
    return (pg_insert if dialect == "postgresql" else sqlite_insert)(table)


def record_finished(session: Any, trial_ids: Sequence[int]) -> None:
    """Fold trials that just reached a finished status into their arms; bump their proxies.

    Call it inside the transaction that finished them (``Repository.finish_trial``,
    ``fail_trial``, ``requeue_expired``): the summary commits with the result or not at all. Ids
    of trials not in a finished status are ignored. Arms are locked in key order (PostgreSQL: FOR
    UPDATE), so two transactions folding several arms cannot deadlock each other.
    """
    if not trial_ids:
        return
    dialect = session.get_bind().dialect.name
    t = TrialRow.__table__
    cols = [t.c[c] for c in _TRIAL_COLUMNS]
    # An archived trial (its arm archived in its study) or a trial of an archived study counts
    # nowhere, as in ``rebuild``: a study is archived only once finished, but a way round the
    # API's refusal (a CLI resume) must not put its trials back on the boards.
    rows = session.execute(
        sa.select(*cols).where(
            t.c.id.in_(list(trial_ids)),
            t.c.status.in_(FINISHED),
            *shown_trials(t.c.archived, t.c.study_id),
            t.c.reused_from.is_(None),  # a copy of a run already folded (trials.reuse_finished)
        )
    ).all()
    by_arm: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_arm[(r.proxy, r.arm_key)].append(r._mapping)
    for proxy, key in sorted(by_arm):
        _fold_into_row(session, dialect, proxy, key, by_arm[(proxy, key)])
    for proxy in sorted({p for p, _k in by_arm}):
        bump(session, f"proxy:{proxy}")


def _fold_into_row(
    session: Any, dialect: str, proxy: str, key: str, trials: Iterable[Mapping[str, Any]]
) -> None:
    a = ArmResultRow.__table__
    where = (a.c.proxy == proxy, a.c.arm_key == key)
    locked = sa.select(a.c.id, *(a.c[f] for f in _ARM_FIELDS)).where(*where)
    if dialect == "postgresql":
        locked = locked.with_for_update()
    for _ in range(2):  # a second pass only when another transaction created the row meanwhile
        current = session.execute(locked).first()
        state = _arm_state(current) if current is not None else None
        for trial in trials:
            state = fold(state, trial)
        assert state is not None
        if current is not None:
            session.execute(
                a.update().where(a.c.id == current.id).values(**state, updated_at=utcnow())
            )
            return
        stmt = _insert(dialect, a).values(**state, updated_at=utcnow())
        inserted = session.execute(
            stmt.on_conflict_do_nothing(index_elements=["proxy", "arm_key"]).returning(a.c.id)
        ).first()
        if inserted is not None:
            return
    raise RuntimeError(f"could not fold trials into arm {proxy}/{key}")


def shown_trials(archived: Any, study_id: Any) -> list[Any]:
    """The conditions that keep archived trials out of a board: the trial's arm is not archived
    in its study, and its study is not archived (migration 0010). ``archived`` and
    ``study_id`` are the trials table's columns (ORM, Core or a plain ``sa.column``)."""
    studies = sa.table("studies", sa.column("id"), sa.column("archived_at"))
    return [
        archived.is_not(True),
        study_id.not_in(sa.select(studies.c.id).where(studies.c.archived_at.is_not(None))),
    ]


def rebuild(connection: Any, *, proxy: str | None = None, archives: bool = True) -> int:
    """Recompute ``arm_results`` from the trials table (all proxies, or one); returns the arms.

    Migration 0006 backfills with it; it also repairs the table should it ever be suspected, and
    archiving or restoring a study or an arm refolds its proxy. Reads the trials in id order in
    batches, so memory holds the arms, not the trials. ``archives``: skip archived trials and
    the trials of archived studies (False only for schemas older than migration 0010, which
    have no archives).
    """
    dialect = connection.dialect.name
    a = ArmResultRow.__table__
    # copies of runs (migration 0011 on) count once, as the run they copy
    reuse = "reused_from" in {c["name"] for c in sa.inspect(connection).get_columns("trials")}
    extra = (*(("archived",) if archives else ()), *(("reused_from",) if reuse else ()))
    t = _trials_table(*extra)
    q = (
        sa.select(*(t.c[c] for c in _TRIAL_COLUMNS))
        .where(t.c.status.in_(FINISHED))
        .order_by(t.c.id)
    )
    if archives:
        q = q.where(*shown_trials(t.c.archived, t.c.study_id))
    if reuse:
        q = q.where(t.c.reused_from.is_(None))
    delete = a.delete()
    if proxy is not None:
        q = q.where(t.c.proxy == proxy)
        delete = delete.where(a.c.proxy == proxy)
    arms: dict[tuple[str, str], dict[str, Any]] = {}
    last = 0
    while True:
        batch = connection.execute(q.where(t.c.id > last).limit(2000)).all()
        if not batch:
            break
        for r in batch:
            m = r._mapping
            k = (m["proxy"], m["arm_key"])
            arms[k] = fold(arms.get(k), m)
        last = batch[-1].id
    connection.execute(delete)
    now = utcnow()
    items = [{**s, "updated_at": now} for s in arms.values()]
    for i in range(0, len(items), 500):
        connection.execute(_insert(dialect, a), items[i : i + 500])
    for p in sorted({p for p, _k in arms} | ({proxy} if proxy else set())):
        bump(connection, f"proxy:{p}")
    return len(arms)


# -- read versions --------------------------------------------------------------------------------


def bump(session: Any, scope: str) -> None:
    """Increment the read version of ``scope`` (created at 1) in the caller's transaction."""
    v = ReadVersionRow.__table__
    dialect = session.get_bind().dialect.name if hasattr(session, "get_bind") else None
    dialect = dialect or session.dialect.name
    stmt = _insert(dialect, v).values(scope=scope, version=1)
    session.execute(
        stmt.on_conflict_do_update(index_elements=["scope"], set_={"version": v.c.version + 1})
    )


@functools.cache
def _versions_query() -> Any:
    """Built once: every API read runs it, and building it cost as much as running it."""
    v = ReadVersionRow.__table__
    return sa.select(v.c.scope, v.c.version).where(
        v.c.scope.in_(sa.bindparam("scopes", expanding=True))
    )


def read_versions(session: Any, scopes: Iterable[str]) -> dict[str, int]:
    """The current version of each scope (0 for a scope never bumped)."""
    wanted = sorted(set(scopes))
    found = dict(session.execute(_versions_query(), {"scopes": wanted}).all())
    return {s: int(found.get(s, 0)) for s in wanted}
