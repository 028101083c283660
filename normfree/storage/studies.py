"""Studies: their rows, specs, statuses and progress counts.

Part of :class:`normfree.storage.Repository` (see ``storage/repository.py`` for the guarantees).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

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
    ArmResultRow,
    StudyRow,
    TrialDiagnosticRow,
    TrialMetricRow,
    TrialRow,
    utcnow,
)
from normfree.storage.records import StudyProgress, StudyRecord

# A study may be deleted only in these statuses, with no trial still running: nothing drives it.
DELETABLE_STUDY_STATUSES = ("cancelled", "complete", "failed")


# A tag: a short label without spaces or commas (the CLI takes several, comma-separated).
MAX_TAGS = 20
MAX_TAG_LENGTH = 40
MAX_NOTE_LENGTH = 5000


class StudyBusy(ValueError):
    """The study is not finished (or a trial of it still runs): it cannot be deleted now."""


def check_tag(tag: str) -> str:
    """``tag`` stripped, or ValueError: 1-40 characters, none of them a space or a comma."""
    tag = tag.strip()
    if not tag or len(tag) > MAX_TAG_LENGTH or any(c.isspace() or c == "," for c in tag):
        raise ValueError(
            f"a tag is 1-{MAX_TAG_LENGTH} characters without spaces or commas: {tag[:50]!r}"
        )
    return tag


def _finished(s: Session, row: StudyRow, study_id: int, doing: str) -> None:
    """StudyBusy unless the study is finished with no trial running (what deleting or
    archiving it, or one of its arms, needs: nothing drives it)."""
    if row.status not in DELETABLE_STUDY_STATUSES:
        raise StudyBusy(
            f"study {study_id} is {row.status}; only a "
            f"{', '.join(DELETABLE_STUDY_STATUSES)} study can be {doing} (cancel it first)"
        )
    running = s.scalar(
        select(func.count()).where(TrialRow.study_id == study_id, TrialRow.status == "RUNNING")
    )
    if running:
        raise StudyBusy(
            f"study {study_id} still has {running} running trials; they stop at their "
            f"next epoch report: try again then"
        )


def _removal(s: Session, study_id: int, arm: str | None = None) -> dict[str, Any]:
    """What deleting a study (or one arm of it) removes, counted: trials, curve points,
    diagnostics rows, and the leaderboard arms whose summaries change (``arm_results`` rows
    that fold its trials: each is folded again without them, and dropped when nothing else is
    left in it)."""
    where = [TrialRow.study_id == study_id] + ([TrialRow.arm_key == arm] if arm else [])
    ids = select(TrialRow.id).where(*where)
    arms = sorted({str(k) for (k,) in s.execute(select(TrialRow.arm_key).where(*where).distinct())})
    proxies = sorted(
        {str(p) for (p,) in s.execute(select(TrialRow.proxy).where(*where).distinct())}
    )
    summaries = (
        s.scalar(
            select(func.count()).where(
                ArmResultRow.proxy.in_(proxies), ArmResultRow.arm_key.in_(arms)
            )
        )
        if arms
        else 0
    )
    return {
        "trials": int(s.scalar(select(func.count()).where(*where)) or 0),
        "curve_points": int(
            s.scalar(select(func.count()).where(TrialMetricRow.trial_id.in_(ids))) or 0
        ),
        "diagnostics": int(
            s.scalar(select(func.count()).where(TrialDiagnosticRow.trial_id.in_(ids))) or 0
        ),
        "arms": arms,
        "leaderboard_arms": int(summaries or 0),
        "proxies": proxies,
    }


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
            _finished(s, row, study_id, "deleted")
            proxy, optuna_name = row.proxy, row.optuna_study_name
            s.execute(delete(TrialRow).where(TrialRow.study_id == study_id))
            s.execute(delete(StudyRow).where(StudyRow.id == study_id))
            s.flush()
            aggregates.rebuild(s.connection(), proxy=proxy)  # and bumps the proxy's reads
            return optuna_name

    def study_removal(self, study_id: int, arm_key: str | None = None) -> dict[str, Any]:
        """What deleting the study (or, with ``arm_key``, that arm of it) would remove, without
        removing anything: the preview a delete shows first. Keys: ``study_id``, ``arm_key``,
        ``status``, ``archived``, ``trials``, ``curve_points``, ``diagnostics``, ``arms``,
        ``leaderboard_arms``, ``proxies``, ``optuna_study`` (the Optuna study removed with a
        whole study; None for an arm, whose Optuna trials stay: the sampler's history of a
        study that still exists) and ``blocked`` (why it cannot be deleted now, or None).
        KeyError for an unknown study, or an arm with no trial in it."""
        with self.db.session(readonly=True) as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise KeyError(f"no study {study_id}")
            out = _removal(s, study_id, arm_key)
            if arm_key is not None and not out["trials"]:
                raise KeyError(f"study {study_id} has no arm {arm_key}")
            try:
                _finished(s, row, study_id, "deleted")
                blocked = None
            except StudyBusy as exc:
                blocked = str(exc)
            return {
                "study_id": study_id,
                "arm_key": arm_key,
                "status": row.status,
                "archived": row.archived_at is not None,
                **out,
                "optuna_study": row.optuna_study_name if arm_key is None else None,
                "blocked": blocked,
            }

    def delete_arm(self, study_id: int, arm_key: str) -> dict[str, Any]:
        """Delete one arm of a finished study: its trials (curves and diagnostics cascade), and
        fold the leaderboard summaries of its proxy again, in one transaction; returns what was
        removed (as :meth:`study_removal` counts it). KeyError for an unknown study or arm,
        :class:`StudyBusy` unless the study is finished with no trial running."""
        with self.db.session() as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise KeyError(f"no study {study_id}")
            _finished(s, row, study_id, "changed")
            removed = _removal(s, study_id, arm_key)
            if not removed["trials"]:
                raise KeyError(f"study {study_id} has no arm {arm_key}")
            s.execute(
                delete(TrialRow).where(TrialRow.study_id == study_id, TrialRow.arm_key == arm_key)
            )
            row.updated_at = utcnow()  # the study's cached summary is keyed on it
            s.flush()
            aggregates.rebuild(s.connection(), proxy=row.proxy)
            return {"study_id": study_id, "arm_key": arm_key, **removed}

    def archive_study(self, study_id: int, archived: bool = True) -> dict[str, Any]:
        """Archive a finished study (it leaves lists and leaderboards, every row kept) or, with
        ``archived=False``, restore it; the study as :meth:`get_study` returns it. Its proxy's
        summaries are folded again in the same transaction. KeyError for an unknown study,
        :class:`StudyBusy` unless it is finished with no trial running (an archived study is
        never driven: its trials could not count anywhere)."""
        with self.db.session() as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise KeyError(f"no study {study_id}")
            if archived:
                _finished(s, row, study_id, "archived")
            if (row.archived_at is not None) != archived:
                row.archived_at = utcnow() if archived else None
                row.updated_at = utcnow()
                s.flush()
                aggregates.rebuild(s.connection(), proxy=row.proxy)
            return _study_dict(row)

    def archive_arm(self, study_id: int, arm_key: str, archived: bool = True) -> int:
        """Take one arm of a study off the leaderboards (``archived=False``: put it back); the
        number of its trials. Its trials are flagged, so a trial of it finishing later still
        counts nowhere. KeyError for an unknown study or arm."""
        with self.db.session() as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise KeyError(f"no study {study_id}")
            res = s.execute(
                update(TrialRow)
                .where(TrialRow.study_id == study_id, TrialRow.arm_key == arm_key)
                .values(archived=archived)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 0:
                raise KeyError(f"study {study_id} has no arm {arm_key}")
            row.updated_at = utcnow()
            s.flush()
            aggregates.rebuild(s.connection(), proxy=row.proxy)
            return int(res.rowcount)

    def archived_arms(self, study_id: int) -> list[str]:
        """The arm keys of a study whose trials are archived."""
        with self.db.session(readonly=True) as s:
            q = select(TrialRow.arm_key).where(
                TrialRow.study_id == study_id, TrialRow.archived.is_(True)
            )
            return sorted({str(k) for (k,) in s.execute(q.distinct())})

    def tag_study(
        self, study_id: int, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> list[str]:
        """Add and remove tags of a study (each checked by :func:`check_tag`); its tags, sorted.
        KeyError for an unknown study, ValueError for a bad tag or more than :data:`MAX_TAGS`."""
        adding = {check_tag(t) for t in add}
        dropping = {check_tag(t) for t in remove}
        with self.db.session() as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise KeyError(f"no study {study_id}")
            held = {str(t) for t in row.tags} if isinstance(row.tags, list) else set()
            tags = sorted((held | adding) - dropping)
            if len(tags) > MAX_TAGS:
                raise ValueError(f"a study has at most {MAX_TAGS} tags ({len(tags)} asked)")
            row.tags = tags
            row.updated_at = utcnow()
            return tags

    def note_study(self, study_id: int, note: str | None) -> str | None:
        """Set (None or empty: clear) a study's note; the note. KeyError for an unknown study,
        ValueError over :data:`MAX_NOTE_LENGTH` characters."""
        note = (note or "").strip() or None
        if note is not None and len(note) > MAX_NOTE_LENGTH:
            raise ValueError(f"a note is at most {MAX_NOTE_LENGTH} characters ({len(note)})")
        with self.db.session() as s:
            row = s.get(StudyRow, study_id)
            if row is None:
                raise KeyError(f"no study {study_id}")
            row.note = note
            row.updated_at = utcnow()
            return note

    def get_study(self, study_id: int) -> StudyRecord | None:
        """The study as a dict (id, kind, name, proxy, spec, status, optuna_study_name, times)."""
        with self.db.session(readonly=True) as s:
            row = s.get(StudyRow, study_id)
            return _study_dict(row) if row else None

    def get_study_spec(self, study_id: int) -> StudySpec | None:
        """The study's ``StudySpec``, parsed back (None if there is no such study)."""
        study = self.get_study(study_id)
        return StudySpec.model_validate(study["spec"]) if study else None

    def list_studies(
        self, *, status: str | None = None, archived: bool | None = None, tag: str | None = None
    ) -> list[StudyRecord]:
        """Studies, newest first, optionally of one status, with a tag. ``archived``: None
        lists every study (what the engine's own scans need), False only those not archived,
        True archived ones too (the API's ``?archived=true``)."""
        q = select(StudyRow).order_by(StudyRow.id.desc())
        if status is not None:
            q = q.where(StudyRow.status == status)
        if archived is False:
            q = q.where(StudyRow.archived_at.is_(None))
        with self.db.session(readonly=True) as s:
            rows = [_study_dict(r) for r in s.scalars(q)]
        return [r for r in rows if tag in r["tags"]] if tag is not None else rows

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
