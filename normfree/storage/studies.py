"""Studies: their rows, specs, statuses and progress counts.

Part of :class:`normfree.storage.Repository` (see ``storage/repository.py`` for the guarantees).
"""

from __future__ import annotations

from sqlalchemy import delete, func, select, update

from normfree.specs import (
    STUDY_STATUSES,
    TRIAL_STATUSES,
    StudySpec,
)
from normfree.storage import aggregates
from normfree.storage._common import (
    RepositoryBase,
    _study_dict,
)
from normfree.storage.models import (
    StudyRow,
    TrialRow,
    utcnow,
)
from normfree.storage.records import StudyProgress, StudyRecord

# A study may be deleted only in these statuses, with no trial still running: nothing drives it.
DELETABLE_STUDY_STATUSES = ("cancelled", "complete", "failed")


class StudyBusy(ValueError):
    """The study is not finished (or a trial of it still runs): it cannot be deleted now."""


class StudyRepository(RepositoryBase):
    """Studies: their rows, specs, statuses and progress counts."""

    # -- studies -----------------------------------------------------------------------------

    def create_study(
        self,
        spec: StudySpec,
        *,
        optuna_study_name: str | None = None,
        status: str = "pending",
        owner_token_id: int | None = None,
    ) -> int:
        """Store a new study (status ``pending``, or ``creating`` while the engine writes its
        Optuna study and trials: ``workers.driver.create_study``); returns its id.

        Its Optuna study name defaults to ``normfree-study-<id>``. ``owner_token_id``: the API
        token that created it (only it or an admin may control it).
        """
        if status not in STUDY_STATUSES:
            raise ValueError(f"unknown study status {status!r}")
        with self.db.session() as s:
            row = StudyRow(
                kind=spec.kind,
                name=spec.name,
                proxy=spec.proxy,
                spec=spec.model_dump(mode="json"),
                status=status,
                optuna_study_name=optuna_study_name,
                owner_token_id=owner_token_id,
            )
            s.add(row)
            s.flush()
            if row.optuna_study_name is None:
                row.optuna_study_name = f"normfree-study-{row.id}"
            return row.id

    def delete_study(self, study_id: int) -> None:
        """Remove a study that never ran, with its trial rows: the undo of a failed creation."""
        with self.db.session() as s:
            s.execute(delete(TrialRow).where(TrialRow.study_id == study_id))
            s.execute(delete(StudyRow).where(StudyRow.id == study_id))

    def finish_creation(self, study_id: int) -> bool:
        """``creating`` -> ``pending`` in one UPDATE (the commit that makes a new study whole);
        False when the study is no longer ``creating`` (a restart removed it)."""
        with self.db.session() as s:
            res = s.execute(
                update(StudyRow)
                .where(StudyRow.id == study_id, StudyRow.status == "creating")
                .values(status="pending", updated_at=utcnow())
            )
            return res.rowcount == 1

    def delete_finished_study(self, study_id: int) -> str | None:
        """Delete a finished study with its trials (curves and diagnostics cascade) and fold
        the leaderboard summaries of its proxy again, in one transaction; returns its Optuna
        study name (the caller removes that study: another database). KeyError when there is no
        such study, :class:`StudyBusy` unless it is cancelled, complete or failed with no trial
        running."""
        with self.db.session() as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise KeyError(f"no study {study_id}")
            if row.status not in DELETABLE_STUDY_STATUSES:
                raise StudyBusy(
                    f"study {study_id} is {row.status}; only a "
                    f"{', '.join(DELETABLE_STUDY_STATUSES)} study can be deleted (cancel it first)"
                )
            running = s.scalar(
                select(func.count()).where(
                    TrialRow.study_id == study_id, TrialRow.status == "RUNNING"
                )
            )
            if running:
                raise StudyBusy(
                    f"study {study_id} still has {running} running trials; they stop at their "
                    "next epoch report: delete it then"
                )
            proxy, optuna_name = row.proxy, row.optuna_study_name
            s.execute(delete(TrialRow).where(TrialRow.study_id == study_id))
            s.execute(delete(StudyRow).where(StudyRow.id == study_id))
            s.flush()
            aggregates.rebuild(s.connection(), proxy=proxy)  # and bumps the proxy's reads
            return optuna_name

    def get_study(self, study_id: int) -> StudyRecord | None:
        """The study as a dict (id, kind, name, proxy, spec, status, optuna_study_name, times)."""
        with self.db.session(readonly=True) as s:
            row = s.get(StudyRow, study_id)
            return _study_dict(row) if row else None

    def get_study_spec(self, study_id: int) -> StudySpec | None:
        """The study's ``StudySpec``, parsed back (None if there is no such study)."""
        study = self.get_study(study_id)
        return StudySpec.model_validate(study["spec"]) if study else None

    def list_studies(self, *, status: str | None = None) -> list[StudyRecord]:
        """All studies, newest first, optionally of one status."""
        q = select(StudyRow).order_by(StudyRow.id.desc())
        if status is not None:
            q = q.where(StudyRow.status == status)
        with self.db.session(readonly=True) as s:
            return [_study_dict(r) for r in s.scalars(q)]

    def set_study_status(self, study_id: int, status: str) -> None:
        """Set a study's status (one of ``STUDY_STATUSES``); KeyError if there is no such study.

        Pausing or cancelling stops ``lease_next`` from handing out its WAITING trials at once.
        """
        if status not in STUDY_STATUSES:
            raise ValueError(f"unknown study status {status!r}; expected one of {STUDY_STATUSES}")
        with self.db.session() as s:
            res = s.execute(
                update(StudyRow)
                .where(StudyRow.id == study_id)
                .values(status=status, updated_at=utcnow())
            )
            if res.rowcount == 0:
                raise KeyError(f"no study {study_id}")

    def study_progress(self, study_id: int) -> StudyProgress:
        """Counts per trial status plus totals and the best finished trial.

        Keys: ``study_id``, ``status`` (the study's), ``counts`` (every trial status, zeros
        included), ``total``, ``finished`` (terminal trials), ``fraction_finished``,
        ``reused`` (trials carrying an earlier study's result: ``reuse_finished``), ``best``
        (``{"trial_id", "candidate", "axis_values", "seed", "value", "objective", "direction"}``
        of the best COMPLETE trial, or None).
        """
        with self.db.session(readonly=True) as s:
            study = s.get(StudyRow, study_id)
            if study is None:
                raise KeyError(f"no study {study_id}")
            counts = dict.fromkeys(TRIAL_STATUSES, 0)
            for st, n in s.execute(
                select(TrialRow.status, func.count())
                .where(TrialRow.study_id == study_id)
                .group_by(TrialRow.status)
            ):
                counts[st] = int(n)
            done = (
                TrialRow.study_id == study_id,
                TrialRow.status == "COMPLETE",
                TrialRow.objective_value.is_not(None),
            )
            # One direction per study (its proxy's objective); the last finished trial says it.
            direction = s.scalar(
                select(TrialRow.direction)
                .where(*done)
                .order_by(TrialRow.finished_at.desc(), TrialRow.id.desc())
                .limit(1)
            )
            order = (
                TrialRow.objective_value.asc()
                if direction == "minimize"
                else TrialRow.objective_value.desc()
            )
            best_row = s.scalar(select(TrialRow).where(*done).order_by(order, TrialRow.id).limit(1))
            total = sum(counts.values())
            finished = total - counts["WAITING"] - counts["RUNNING"]
            reused = s.scalar(
                select(func.count()).where(
                    TrialRow.study_id == study_id, TrialRow.reused_from.is_not(None)
                )
            )
            best = None
            if best_row is not None:
                best = {
                    "trial_id": best_row.id,
                    "candidate": best_row.candidate,
                    "axis_values": best_row.axis_values or {},
                    "seed": best_row.seed,
                    "value": best_row.objective_value,
                    "objective": best_row.objective,
                    "direction": best_row.direction,
                }
            return {
                "study_id": study_id,
                "status": study.status,
                "counts": counts,
                "total": total,
                "finished": finished,
                "fraction_finished": finished / total if total else 0.0,
                "reused": int(reused or 0),
                "best": best,
            }
