"""Trials: planning (idempotent inserts), leases, results written once, and reads.

Part of :class:`normfree.storage.Repository` (see ``storage/repository.py`` for the guarantees).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, select, update

from normfree.specs import (
    EpochRecord,
    TrialConfig,
    TrialResult,
)
from normfree.storage import aggregates, reads
from normfree.storage import leaderboard as boards
from normfree.storage._common import (
    DIAGNOSTIC_FIELDS,
    LEASABLE_STUDY_STATUSES,
    TRIAL_RESULT_STATUS,
    LeasedTrial,
    RepositoryBase,
    TrialItem,
    _chunks,
    _epoch_values,
    _jsonable,
    _last_per_epoch,
    _trial_dict,
    _unpack,
    arm_key,
    context_key,
    where_equal,
)
from normfree.storage.models import (
    StudyRow,
    TrialDiagnosticRow,
    TrialMetricRow,
    TrialRow,
    utcnow,
)
from normfree.storage.records import TrialRecord

# A finished trial whose result another study may reuse: an outcome of its configuration.
REUSABLE_STATUSES = ("COMPLETE", "DIVERGED")
# What a reused row takes from the trial that ran (its own id, study, key, axes and Optuna
# number stay; ``finished_at`` is the run's, so "latest seed wins" orders it as that run).
_REUSED_COLUMNS = (
    "status",
    "objective",
    "direction",
    "objective_value",
    "metrics",
    "eval_train_loss",
    "diverged_at_step",
    "spike_step",
    "failure",
    "train_time_s",
    "total_time_s",
    "code_version",
    "worker",
    "started_at",
    "finished_at",
)


class TrialRepository(RepositoryBase):
    """Trials: planning (idempotent inserts), leases, results written once, and reads."""

    # -- trials: planning --------------------------------------------------------------------

    def add_trials(self, study_id: int, items: Iterable[TrialItem]) -> list[int]:
        """Add trials to a study, idempotently by (study, ``TrialConfig.key()``).

        Each item is a ``TrialConfig`` or a tuple ``(config, axis_values, optuna_number)`` with
        the last two optional. Returns the trial ids in the order of ``items`` (existing ids for
        configs already present; an existing trial gains an ``optuna_number`` it lacked).
        """
        rows: list[dict[str, Any]] = []
        for item in items:
            config, axis, number = _unpack(item)
            rows.append(
                {
                    "study_id": study_id,
                    "trial_key": config.key(),
                    "arm_key": arm_key(config),
                    "context_key": context_key(config),
                    "proxy": config.proxy,
                    "candidate": config.norm.name,
                    "norm": config.norm.model_dump(mode="json"),
                    "axis_values": _jsonable(dict(axis or {})),
                    "seed": config.seed,
                    "config": config.model_dump(mode="json"),
                    "status": "WAITING",
                    "attempt": 0,
                    "optuna_number": number,
                    "metrics": {},
                    "created_at": utcnow(),
                    "updated_at": utcnow(),
                }
            )
        if not rows:
            return []
        keys = [r["trial_key"] for r in rows]
        with self.db.session() as s:
            for chunk in _chunks(rows, 200):
                # DO NOTHING, not DO UPDATE: re-planning must not lock (or rewrite) rows that
                # exist, or a concurrent lease_next (SKIP LOCKED) would see no WAITING trial.
                stmt = self._insert(TrialRow).values(chunk)
                s.execute(stmt.on_conflict_do_nothing(index_elements=["study_id", "trial_key"]))
            ids: dict[str, int] = {}
            for chunk in _chunks(sorted(set(keys)), 500):
                for tid, key in s.execute(
                    select(TrialRow.id, TrialRow.trial_key).where(
                        TrialRow.study_id == study_id, TrialRow.trial_key.in_(chunk)
                    )
                ):
                    ids[key] = tid
            numbered = [(ids[r["trial_key"]], r["optuna_number"]) for r in rows]
            for tid, number in numbered:
                if number is not None:  # an existing trial gains the Optuna number it lacked
                    s.execute(
                        update(TrialRow)
                        .where(TrialRow.id == tid, TrialRow.optuna_number.is_(None))
                        .values(optuna_number=number)
                    )
        return [ids[k] for k in keys]

    def reuse_finished(self, study_id: int, code_version: str) -> list[int]:
        """Give the study's unstarted trials the result of a finished trial with the same key.

        A trial key is the whole configuration (proxy, operator, seed, budget, data, lr), and
        ``code_version`` the trainer's code: a trial of any other study that ran the same key
        under the same version and ended COMPLETE or DIVERGED (a result of the configuration;
        PRUNED depends on the other study's pruner, FAILED on its worker) answers the planned
        one. Its result, curves and diagnostics are copied into the row, which records
        ``reused_from`` (the trial that ran) and is never leased. Copies are not folded into
        the arm summaries: the trial they copy already is, and a proxy's board counts runs.
        Returns the ids of the rows answered this way.
        """
        now = utcnow()
        t = TrialRow.__table__
        with self.db.session() as s:
            planned = {
                key: tid
                for tid, key in s.execute(
                    select(t.c.id, t.c.trial_key).where(
                        t.c.study_id == study_id,
                        t.c.status == "WAITING",
                        t.c.attempt == 0,
                        t.c.reused_from.is_(None),
                    )
                )
            }
            sources: dict[str, Any] = {}
            for chunk in _chunks(sorted(planned), 500):
                for row in s.execute(
                    select(t)
                    .where(
                        t.c.trial_key.in_(chunk),
                        t.c.code_version == code_version,
                        t.c.status.in_(REUSABLE_STATUSES),
                        t.c.reused_from.is_(None),
                        t.c.study_id != study_id,
                    )
                    .order_by(t.c.finished_at, t.c.id)
                ):
                    sources[row.trial_key] = row  # the latest finished run of the key wins
            reused = []
            for key, src in sorted(sources.items()):
                tid = planned[key]
                copied = {c: getattr(src, c) for c in _REUSED_COLUMNS}
                s.execute(
                    update(TrialRow)
                    .where(TrialRow.id == tid, TrialRow.status == "WAITING")
                    .values(**copied, reused_from=src.id, updated_at=now)
                )
                for table in (TrialMetricRow.__table__, TrialDiagnosticRow.__table__):
                    rows = [
                        {**{c: v for c, v in r._mapping.items() if c != "id"}, "trial_id": tid}
                        for r in s.execute(select(table).where(table.c.trial_id == src.id))
                    ]
                    if rows:
                        s.execute(table.insert(), rows)
                reads.store_trial_document(s.connection(), tid)
                reused.append(tid)
            for proxy in sorted({src.proxy for src in sources.values()}):
                aggregates.bump(s, f"proxy:{proxy}")  # a study's board shows the copies
        return reused

    def set_optuna_number(self, trial_id: int, number: int) -> None:
        """Record the Optuna trial number of one of our trials (asked after it was added)."""
        with self.db.session() as s:
            s.execute(update(TrialRow).where(TrialRow.id == trial_id).values(optuna_number=number))

    # -- trials: leases ----------------------------------------------------------------------

    def lease_next(
        self, study_id: int | None, owner: str, lease_seconds: float
    ) -> LeasedTrial | None:
        """Atomically move the oldest WAITING trial to RUNNING for ``owner``; None if none.

        ``study_id=None`` leases from any study. Only studies that are ``pending`` or ``running``
        hand out trials (pause and cancel act on WAITING trials at once). The attempt counter is
        incremented; the lease expires after ``lease_seconds`` unless renewed.
        """
        now = utcnow()
        expires = now + timedelta(seconds=lease_seconds)
        leasable = select(StudyRow.id).where(StudyRow.status.in_(LEASABLE_STUDY_STATUSES))
        q = (
            select(TrialRow.id)
            .where(TrialRow.status == "WAITING", TrialRow.study_id.in_(leasable))
            .order_by(TrialRow.id)
            .limit(1)
        )
        if study_id is not None:
            q = q.where(TrialRow.study_id == study_id)
        if self.db.is_postgres:
            q = q.with_for_update(skip_locked=True, of=TrialRow)
        with self.db.session() as s:
            for _ in range(10):  # SQLite holds the write lock: the first try wins there
                tid = s.scalar(q)
                if tid is None:
                    return None
                res = s.execute(
                    update(TrialRow)
                    .where(TrialRow.id == tid, TrialRow.status == "WAITING")
                    .values(
                        status="RUNNING",
                        lease_owner=owner,
                        lease_expires_at=expires,
                        attempt=TrialRow.attempt + 1,
                        started_at=now,
                        updated_at=now,
                    )
                )
                if res.rowcount == 1:
                    row = s.get(TrialRow, tid, populate_existing=True)
                    assert row is not None
                    return LeasedTrial(
                        id=row.id,
                        study_id=row.study_id,
                        config=TrialConfig.model_validate(row.config),
                        attempt=row.attempt,
                        owner=owner,
                        expires_at=expires,
                        optuna_number=row.optuna_number,
                        axis_values=row.axis_values or {},
                    )
        return None

    def _held(self, trial_id: int, owner: str, attempt: int) -> Any:
        return and_(
            TrialRow.id == trial_id,
            TrialRow.status == "RUNNING",
            TrialRow.lease_owner == owner,
            TrialRow.attempt == attempt,
        )

    def _set_held(
        self, s: Any, trial_id: int, owner: str, attempt: int, *also: Any, **values: Any
    ) -> bool:
        """In session ``s``, set ``values`` on the trial only while this lease (and the extra
        conditions ``also``) holds it: every write of a lease holder is fenced the same way, so
        a worker that lost its lease cannot overwrite the retry's row. ``updated_at`` defaults
        to now. True when the row was written."""
        values.setdefault("updated_at", utcnow())
        res = s.execute(
            update(TrialRow).where(self._held(trial_id, owner, attempt), *also).values(**values)
        )
        return res.rowcount == 1

    def renew_lease(self, trial_id: int, owner: str, attempt: int, lease_seconds: float) -> bool:
        """Extend a live lease; False when it was lost (expired, requeued, finished): stop work.

        An expired lease is not revived even if nobody requeued the trial yet, so a worker that
        stalled past its lease cannot race the retry that ``requeue_expired`` will start.
        """
        now = utcnow()
        with self.db.session() as s:
            return self._set_held(
                s,
                trial_id,
                owner,
                attempt,
                TrialRow.lease_expires_at > now,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                updated_at=now,
            )

    def requeue_expired(
        self, now: datetime | None = None, max_attempts: int | None = None
    ) -> list[int]:
        """RUNNING trials whose lease expired go back to WAITING, or to FAILED (with the reason)
        once they used ``max_attempts`` attempts. Returns the ids of every trial it moved."""
        now = now or utcnow()
        max_attempts = self.max_attempts if max_attempts is None else max_attempts
        expired = and_(TrialRow.status == "RUNNING", TrialRow.lease_expires_at < now)
        q = select(TrialRow.id, TrialRow.attempt, TrialRow.releases, TrialRow.lease_owner).where(
            expired
        )
        if self.db.is_postgres:
            q = q.with_for_update(skip_locked=True)
        moved: list[int] = []
        with self.db.session() as s:
            for tid, attempt, releases, owner in s.execute(q).all():
                lost = f"lease expired on attempt {attempt} (worker {owner or '?'} lost)"
                charged = attempt - (releases or 0)
                if charged >= max_attempts:
                    values: dict[str, Any] = {
                        "status": "FAILED",
                        "error": f"{lost}; gave up after {charged} of {max_attempts} attempts",
                        "finished_at": now,
                    }
                else:
                    values = {
                        "status": "WAITING",
                        "error": f"{lost}; requeued",
                        "lease_owner": None,
                    }
                res = s.execute(
                    update(TrialRow)
                    .where(TrialRow.id == tid, expired, TrialRow.attempt == attempt)
                    .values(lease_expires_at=None, updated_at=now, **values)
                )
                if res.rowcount == 1:
                    moved.append(tid)
            aggregates.record_finished(s, moved)  # folds the ones that ended FAILED
        return moved

    # -- trials: results ---------------------------------------------------------------------

    def record_epoch(
        self,
        trial_id: int,
        owner: str,
        attempt: int,
        record: EpochRecord,
        *,
        lease_seconds: float | None = None,
    ) -> bool:
        """Store one learning-curve point while holding the lease (else ignored: False).

        Idempotent per epoch (a retry overwrites the earlier attempt's point). With
        ``lease_seconds`` the same transaction also renews the lease (a free heartbeat).
        """
        now = utcnow()
        with self.db.session() as s:
            renew = (
                {}
                if lease_seconds is None
                else {"lease_expires_at": now + timedelta(seconds=lease_seconds)}
            )
            if not self._set_held(s, trial_id, owner, attempt, updated_at=now, **renew):
                return False
            values = _epoch_values(trial_id, record)
            stmt = self._insert(TrialMetricRow).values(**values)
            stmt = stmt.on_conflict_do_update(
                index_elements=["trial_id", "epoch"],
                set_={k: stmt.excluded[k] for k in values if k not in ("trial_id", "epoch")},
            )
            s.execute(stmt)
            return True

    def finish_trial(self, trial_id: int, owner: str, attempt: int, result: TrialResult) -> bool:
        """Write a trial's result once: only the lease holder at ``attempt`` of a RUNNING trial.

        Status, metrics, objective, timings, curves and diagnostics go in one transaction. A
        second call, a stale attempt or another owner is a no-op returning False.
        """
        now = utcnow()
        with self.db.session() as s:
            held = self._set_held(
                s,
                trial_id,
                owner,
                attempt,
                status=TRIAL_RESULT_STATUS[result.status],
                objective=result.objective,
                direction=result.direction,
                objective_value=result.value if result.status == "complete" else None,
                metrics=_jsonable(result.metrics),
                eval_train_loss=result.eval_train_loss,
                diverged_at_step=result.diverged_at_step,
                spike_step=result.spike_step,
                failure=result.failure[:300] if result.failure else None,
                train_time_s=result.train_time_s,
                total_time_s=result.total_time_s,
                code_version=result.code_version,
                worker=result.worker or owner,
                error=result.error,
                lease_expires_at=None,
                finished_at=now,
                updated_at=now,
            )
            if not held:
                return False
            if result.curves:
                s.execute(
                    TrialMetricRow.__table__.delete().where(TrialMetricRow.trial_id == trial_id)
                )
                s.execute(
                    TrialMetricRow.__table__.insert(),
                    [_epoch_values(trial_id, r) for r in _last_per_epoch(result.curves)],
                )
            if result.diagnostics:
                s.execute(
                    TrialDiagnosticRow.__table__.delete().where(
                        TrialDiagnosticRow.trial_id == trial_id
                    )
                )
                by_key = {(d.epoch, d.layer): d for d in result.diagnostics}
                s.execute(
                    TrialDiagnosticRow.__table__.insert(),
                    [
                        {
                            "trial_id": trial_id,
                            "epoch": d.epoch,
                            "layer": d.layer,
                            **{f: getattr(d, f) for f in DIAGNOSTIC_FIELDS},
                            "extra": _jsonable(d.extra),
                        }
                        for d in by_key.values()
                    ],
                )
            reads.store_trial_document(s.connection(), trial_id)
            aggregates.record_finished(s, [trial_id])
            return True

    def fail_trial(
        self, trial_id: int, owner: str, attempt: int, reason: str, retry: bool = False
    ) -> bool:
        """The lease holder gives up: back to WAITING when ``retry`` and attempts remain, else
        FAILED with ``reason``. False (no-op) when the lease is not held."""
        now = utcnow()
        with self.db.session() as s:
            row = s.scalar(select(TrialRow).where(self._held(trial_id, owner, attempt)))
            if row is None:
                return False
            again = retry and row.attempt - (row.releases or 0) < self.max_attempts
            values: dict[str, Any] = {"error": reason, "lease_expires_at": None, "updated_at": now}
            if again:
                values.update(status="WAITING", lease_owner=None)
            else:
                values.update(status="FAILED", finished_at=now)
            held = self._set_held(s, trial_id, owner, attempt, **values)
            if held and not again:
                aggregates.record_finished(s, [trial_id])
            return held

    def release_lease(
        self, trial_id: int, owner: str, attempt: int, reason: str | None = None
    ) -> bool:
        """The lease holder hands the trial back to WAITING without charging an attempt.

        For a study paused under a running trial. ``attempt`` is not decremented (it stays the
        lease's fencing token, so the old worker's late writes are still refused); ``releases``
        is incremented instead and retries are bounded by ``attempt - releases``. False (no-op)
        when the lease is not held.
        """
        return self._update_held(
            trial_id,
            owner,
            attempt,
            status="WAITING",
            lease_owner=None,
            lease_expires_at=None,
            releases=TrialRow.releases + 1,
            error=reason,
        )

    def cancel_running(
        self, trial_id: int, owner: str, attempt: int, reason: str = "study cancelled"
    ) -> bool:
        """The lease holder stops a trial for good: CANCELLED (like ``cancel_waiting``).

        False (no-op) when the lease is not held.
        """
        return self._update_held(
            trial_id,
            owner,
            attempt,
            status="CANCELLED",
            lease_expires_at=None,
            error=reason,
            finished_at=utcnow(),
        )

    def _update_held(self, trial_id: int, owner: str, attempt: int, **values: Any) -> bool:
        """Set ``values`` (and ``updated_at``) on the trial if this lease still holds it."""
        with self.db.session() as s:
            return self._set_held(s, trial_id, owner, attempt, **values)

    def cancel_waiting(self, study_id: int) -> int:
        """Mark the study's WAITING trials CANCELLED (they never ran); returns how many."""
        now = utcnow()
        with self.db.session() as s:
            res = s.execute(
                update(TrialRow)
                .where(TrialRow.study_id == study_id, TrialRow.status == "WAITING")
                .values(
                    status="CANCELLED", error="study cancelled", finished_at=now, updated_at=now
                )
            )
            return int(res.rowcount)

    # -- trials: reads -----------------------------------------------------------------------

    def get_trial(self, trial_id: int) -> TrialRecord | None:
        """One trial with ``curves`` (per epoch) and ``diagnostics`` (per epoch and layer)."""
        with self.db.read() as conn:
            return reads.trial_detail(conn, trial_id)

    def get_trial_by_key(self, study_id: int, trial_key: str) -> TrialRecord | None:
        """The study's trial with ``TrialConfig.key() == trial_key`` (with curves), or None."""
        with self.db.session(readonly=True) as s:
            tid = s.scalar(
                select(TrialRow.id).where(
                    TrialRow.study_id == study_id, TrialRow.trial_key == trial_key
                )
            )
        return self.get_trial(tid) if tid is not None else None

    def list_trials(
        self,
        study_id: int | None = None,
        *,
        status: str | Sequence[str] | None = None,
        proxy: str | None = None,
        candidate: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Trials (without curves) by id, filtered by study, status(es), proxy and candidate."""
        q = where_equal(
            select(TrialRow).order_by(TrialRow.id),
            TrialRow,
            study_id=study_id,
            proxy=proxy,
            candidate=candidate,
        )
        if status is not None:
            q = q.where(TrialRow.status.in_([status] if isinstance(status, str) else status))
        q = q.offset(offset)
        if limit is not None:
            q = q.limit(limit)
        with self.db.session(readonly=True) as s:
            return [_trial_dict(r) for r in s.scalars(q)]

    def list_proxies(self) -> list[str]:
        """Proxies that have finished trials, most finished first (for leaderboard menus)."""
        return boards.proxies_by_finished(self.db)
