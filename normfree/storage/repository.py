"""The repository: every read and write the engine and the API make, one transaction each.

Guarantees the rest of normfree relies on:

- ``add_trials`` is idempotent by (study, trial key): re-planning a study never duplicates a run.
- ``lease_next`` hands one WAITING trial to exactly one owner (PostgreSQL: ``FOR UPDATE SKIP
  LOCKED``; SQLite: a conditional UPDATE inside ``BEGIN IMMEDIATE``, checked by rowcount).
- A result is written once: ``finish_trial`` only succeeds for the lease holder at its attempt
  while the trial is RUNNING; any later or stale write is a no-op returning False.
- Reads return plain dicts (JSON-ready, detached from any session), documented per method.

Trial statuses: WAITING, RUNNING, COMPLETE, DIVERGED, PRUNED, FAILED, and CANCELLED (a WAITING
trial of a cancelled study; it never ran and counts nowhere in leaderboards).
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import selectinload

from normfree.specs import (
    STUDY_STATUSES,
    TRIAL_STATUSES,
    EpochRecord,
    StudySpec,
    TrialConfig,
    TrialResult,
)
from normfree.storage import aggregates, stats
from normfree.storage import leaderboard as boards
from normfree.storage.db import Database
from normfree.storage.models import (
    ApiTokenRow,
    CandidateRow,
    StudyRow,
    TrialDiagnosticRow,
    TrialMetricRow,
    TrialRow,
    utcnow,
)

TRIAL_RESULT_STATUS = {
    "complete": "COMPLETE",
    "diverged": "DIVERGED",
    "pruned": "PRUNED",
    "failed": "FAILED",
}
# Studies whose WAITING trials may be leased.
LEASABLE_STUDY_STATUSES = ("pending", "running")
DIAGNOSTIC_FIELDS = (
    "alpha",
    "s_mean",
    "gamma_mean",
    "gamma_std",
    "beta_mean",
    "beta_std",
    "input_std",
    "input_absmax",
    "branch_norm",
    "grad_norm",
)
BASELINE_GROUP = boards.BASELINE_GROUP
REFERENCE_NORM = boards.REFERENCE_NORM

TrialItem = (
    TrialConfig
    | tuple[TrialConfig]
    | tuple[TrialConfig, Mapping[str, Any] | None]
    | tuple[TrialConfig, Mapping[str, Any] | None, int | None]
)


@dataclass(frozen=True)
class LeasedTrial:
    """A trial handed to one worker: run ``config``; write back with (owner, attempt)."""

    id: int
    study_id: int
    config: TrialConfig
    attempt: int
    owner: str
    expires_at: datetime
    optuna_number: int | None
    axis_values: dict[str, Any]


def _hash(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def arm_key(config: TrialConfig) -> str:
    """The trial key without the seed: the seeds of one arm share it (leaderboard unit)."""
    data = config.model_dump(mode="json")
    data.pop("seed")
    return _hash(data)


def context_key(config: TrialConfig) -> str:
    """The trial key without seed and norm: what a candidate is paired with LayerNorm on."""
    data = config.model_dump(mode="json")
    data.pop("seed")
    data.pop("norm")
    return _hash(data)


def _jsonable(obj: Any) -> Any:
    """Pydantic models, dataclasses, mappings and sequences to plain JSON values."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None  # JSON has no NaN/inf (PostgreSQL refuses)
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_jsonable(v) for v in obj]
    return str(obj)


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _candidate_dict(row: CandidateRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "formula": row.formula,
        "canonical": row.canonical,
        "fingerprint": row.fingerprint,
        "properties": row.properties or {},
        "lineage": row.lineage,
        "group": row.group,
        "citation": row.citation,
        "submitter": row.submitter,
        "created_at": _iso(row.created_at),
        "prescreen": row.prescreen,
    }


def _study_dict(row: StudyRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "name": row.name,
        "proxy": row.proxy,
        "spec": row.spec,
        "status": row.status,
        "optuna_study_name": row.optuna_study_name,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
    }


def _trial_dict(row: TrialRow, details: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": row.id,
        "study_id": row.study_id,
        "trial_key": row.trial_key,
        "arm_key": row.arm_key,
        "proxy": row.proxy,
        "candidate": row.candidate,
        "norm": row.norm,
        "axis_values": row.axis_values or {},
        "seed": row.seed,
        "config": row.config,
        "status": row.status,
        "attempt": row.attempt,
        "releases": row.releases or 0,
        "lease_owner": row.lease_owner,
        "lease_expires_at": _iso(row.lease_expires_at),
        "optuna_number": row.optuna_number,
        "objective": row.objective,
        "direction": row.direction,
        "value": row.objective_value,
        "metrics": row.metrics or {},
        "eval_train_loss": row.eval_train_loss,
        "diverged_at_step": row.diverged_at_step,
        "spike_step": row.spike_step,
        "failure": row.failure,
        "train_time_s": row.train_time_s,
        "total_time_s": row.total_time_s,
        "worker": row.worker,
        "error": row.error,
        "created_at": _iso(row.created_at),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
    }
    if details:
        out["curves"] = [
            {
                "epoch": m.epoch,
                "step": m.step,
                "train_loss": m.train_loss,
                "val_loss": m.val_loss,
                "metrics": m.metrics or {},
                "lr": m.lr,
                "wall_time_s": m.wall_time,
            }
            for m in row.curves
        ]
        out["diagnostics"] = [
            {
                "epoch": d.epoch,
                "layer": d.layer,
                **{f: getattr(d, f) for f in DIAGNOSTIC_FIELDS},
                "extra": d.extra or {},
            }
            for d in row.diagnostics
        ]
    return out


def _token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


class Repository:
    """All storage operations of normfree over one :class:`Database`.

    ``max_attempts`` bounds retries (lease expiry and ``fail_trial(retry=True)``); it defaults to
    ``Settings.max_attempts``.
    """

    def __init__(self, db: Database, *, max_attempts: int | None = None) -> None:
        self.db = db
        if max_attempts is None:
            from normfree.settings import get_settings

            max_attempts = get_settings().max_attempts
        self.max_attempts = max_attempts

    # -- dialect helpers ---------------------------------------------------------------------

    def _insert(self, model: Any) -> Any:
        """An INSERT that supports ON CONFLICT on both backends."""
        return (pg_insert if self.db.is_postgres else sqlite_insert)(model)

    # -- candidates --------------------------------------------------------------------------

    def upsert_candidate(self, candidate: Any, submitter: str | None = None) -> int:
        """Insert or update a candidate by name; returns its id.

        ``candidate`` is a ``search_space.Candidate``, a pydantic model or a mapping with the
        fields name, formula, canonical, fingerprint, properties, lineage, group, citation. An
        existing row keeps its creation time, and its submitter unless one is given.
        """
        name = _field(candidate, "name")
        if not name:
            raise ValueError("a candidate needs a name")
        values = {
            "name": str(name),
            "formula": _field(candidate, "formula"),
            "canonical": _field(candidate, "canonical"),
            "fingerprint": _field(candidate, "fingerprint"),
            "properties": _jsonable(_field(candidate, "properties")) or {},
            "lineage": _jsonable(_field(candidate, "lineage")) or {},
            "group": _field(candidate, "group"),
            "citation": _field(candidate, "citation"),
            "submitter": submitter if submitter is not None else _field(candidate, "submitter"),
            "created_at": utcnow(),
        }
        for key in ("formula", "canonical", "fingerprint", "group", "citation"):
            if values[key] is not None:
                values[key] = str(values[key])
        stmt = self._insert(CandidateRow).values(**values)
        updates = {k: stmt.excluded[k] for k in values if k not in ("name", "created_at")}
        if values["submitter"] is None:
            updates.pop("submitter")
        stmt = stmt.on_conflict_do_update(index_elements=["name"], set_=updates).returning(
            CandidateRow.id
        )
        with self.db.session() as s:
            cid = int(s.execute(stmt).scalar_one())
            aggregates.bump(s, "candidates")  # leaderboards and lists show group and properties
            return cid

    def set_candidate_prescreen(self, name: str, prescreen: Mapping[str, Any]) -> bool:
        """Record a stored candidate's prescreen (its status and result); False if none is named
        ``name``. Written after the submission's answer, by the process that ran it."""
        with self.db.session() as s:
            res = s.execute(
                update(CandidateRow)
                .where(CandidateRow.name == name)
                .values(prescreen=_jsonable(dict(prescreen)))
            )
            return res.rowcount == 1

    def get_candidate(self, name: str) -> dict[str, Any] | None:
        """The candidate named ``name`` as a dict (keys as the table's columns), or None."""
        with self.db.session(readonly=True) as s:
            row = s.scalar(select(CandidateRow).where(CandidateRow.name == name))
            return _candidate_dict(row) if row else None

    def list_candidates(
        self,
        *,
        group: str | None = None,
        submitter: str | None = None,
        fingerprint: str | None = None,
        canonical: str | None = None,
        properties: Mapping[str, Any] | None = None,
        name_contains: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Candidates by name, filtered; ``properties`` matches property values exactly."""
        q = select(CandidateRow).order_by(CandidateRow.name)
        if group is not None:
            q = q.where(CandidateRow.group == group)
        if submitter is not None:
            q = q.where(CandidateRow.submitter == submitter)
        if fingerprint is not None:
            q = q.where(CandidateRow.fingerprint == fingerprint)
        if canonical is not None:
            q = q.where(CandidateRow.canonical == canonical)
        if name_contains:
            q = q.where(CandidateRow.name.contains(name_contains, autoescape=True))
        with self.db.session(readonly=True) as s:
            rows = [_candidate_dict(r) for r in s.scalars(q)]
        if properties:
            rows = [r for r in rows if boards.props_match(r["properties"], properties)]
        return rows[offset : None if limit is None else offset + limit]

    # -- studies -----------------------------------------------------------------------------

    def create_study(self, spec: StudySpec, *, optuna_study_name: str | None = None) -> int:
        """Store a new study (status ``pending``); returns its id.

        Its Optuna study name defaults to ``normfree-study-<id>``.
        """
        with self.db.session() as s:
            row = StudyRow(
                kind=spec.kind,
                name=spec.name,
                proxy=spec.proxy,
                spec=spec.model_dump(mode="json"),
                status="pending",
                optuna_study_name=optuna_study_name,
            )
            s.add(row)
            s.flush()
            if row.optuna_study_name is None:
                row.optuna_study_name = f"normfree-study-{row.id}"
            return row.id

    def get_study(self, study_id: int) -> dict[str, Any] | None:
        """The study as a dict (id, kind, name, proxy, spec, status, optuna_study_name, times)."""
        with self.db.session(readonly=True) as s:
            row = s.get(StudyRow, study_id)
            return _study_dict(row) if row else None

    def get_study_spec(self, study_id: int) -> StudySpec | None:
        """The study's ``StudySpec``, parsed back (None if there is no such study)."""
        study = self.get_study(study_id)
        return StudySpec.model_validate(study["spec"]) if study else None

    def list_studies(self, *, status: str | None = None) -> list[dict[str, Any]]:
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

    def study_progress(self, study_id: int) -> dict[str, Any]:
        """Counts per trial status plus totals and the best finished trial.

        Keys: ``study_id``, ``status`` (the study's), ``counts`` (every trial status, zeros
        included), ``total``, ``finished`` (terminal trials), ``fraction_finished``, ``best``
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
                "best": best,
            }

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

    def renew_lease(self, trial_id: int, owner: str, attempt: int, lease_seconds: float) -> bool:
        """Extend a live lease; False when it was lost (expired, requeued, finished): stop work.

        An expired lease is not revived even if nobody requeued the trial yet, so a worker that
        stalled past its lease cannot race the retry that ``requeue_expired`` will start.
        """
        now = utcnow()
        with self.db.session() as s:
            res = s.execute(
                update(TrialRow)
                .where(self._held(trial_id, owner, attempt), TrialRow.lease_expires_at > now)
                .values(lease_expires_at=now + timedelta(seconds=lease_seconds), updated_at=now)
            )
            return res.rowcount == 1

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
            held = s.execute(
                update(TrialRow)
                .where(self._held(trial_id, owner, attempt))
                .values(
                    updated_at=now,
                    **(
                        {"lease_expires_at": now + timedelta(seconds=lease_seconds)}
                        if lease_seconds is not None
                        else {}
                    ),
                )
            ).rowcount
            if held != 1:
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
            res = s.execute(
                update(TrialRow)
                .where(self._held(trial_id, owner, attempt))
                .values(
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
                    worker=result.worker or owner,
                    error=result.error,
                    lease_expires_at=None,
                    finished_at=now,
                    updated_at=now,
                )
            )
            if res.rowcount != 1:
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
            res = s.execute(
                update(TrialRow).where(self._held(trial_id, owner, attempt)).values(**values)
            )
            if res.rowcount == 1 and not again:
                aggregates.record_finished(s, [trial_id])
            return res.rowcount == 1

    def release_lease(
        self, trial_id: int, owner: str, attempt: int, reason: str | None = None
    ) -> bool:
        """The lease holder hands the trial back to WAITING without charging an attempt.

        For a study paused under a running trial. ``attempt`` is not decremented (it stays the
        lease's fencing token, so the old worker's late writes are still refused); ``releases``
        is incremented instead and retries are bounded by ``attempt - releases``. False (no-op)
        when the lease is not held.
        """
        now = utcnow()
        with self.db.session() as s:
            res = s.execute(
                update(TrialRow)
                .where(self._held(trial_id, owner, attempt))
                .values(
                    status="WAITING",
                    lease_owner=None,
                    lease_expires_at=None,
                    releases=TrialRow.releases + 1,
                    error=reason,
                    updated_at=now,
                )
            )
            return res.rowcount == 1

    def cancel_running(
        self, trial_id: int, owner: str, attempt: int, reason: str = "study cancelled"
    ) -> bool:
        """The lease holder stops a trial for good: CANCELLED (like ``cancel_waiting``).

        False (no-op) when the lease is not held.
        """
        now = utcnow()
        with self.db.session() as s:
            res = s.execute(
                update(TrialRow)
                .where(self._held(trial_id, owner, attempt))
                .values(
                    status="CANCELLED",
                    lease_expires_at=None,
                    error=reason,
                    finished_at=now,
                    updated_at=now,
                )
            )
            return res.rowcount == 1

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

    def get_trial(self, trial_id: int) -> dict[str, Any] | None:
        """One trial with ``curves`` (per epoch) and ``diagnostics`` (per epoch and layer)."""
        with self.db.session(readonly=True) as s:
            row = s.scalar(
                select(TrialRow)
                .where(TrialRow.id == trial_id)
                .options(selectinload(TrialRow.curves), selectinload(TrialRow.diagnostics))
            )
            return _trial_dict(row, details=True) if row else None

    def get_trial_by_key(self, study_id: int, trial_key: str) -> dict[str, Any] | None:
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
        q = select(TrialRow).order_by(TrialRow.id)
        if study_id is not None:
            q = q.where(TrialRow.study_id == study_id)
        if status is not None:
            q = q.where(TrialRow.status.in_([status] if isinstance(status, str) else status))
        if proxy is not None:
            q = q.where(TrialRow.proxy == proxy)
        if candidate is not None:
            q = q.where(TrialRow.candidate == candidate)
        q = q.offset(offset)
        if limit is not None:
            q = q.limit(limit)
        with self.db.session(readonly=True) as s:
            return [_trial_dict(r) for r in s.scalars(q)]

    def list_proxies(self) -> list[str]:
        """Proxies that have finished trials, most finished first (for leaderboard menus)."""
        return boards.proxies_by_finished(self.db)

    # -- API tokens --------------------------------------------------------------------------

    def create_token(self, name: str, scopes: Sequence[str] = ("write",)) -> str:
        """Create a token and return its plaintext (shown once; only its SHA-256 is stored).

        A revoked token's name may be reused; an active one raises ValueError.
        """
        plaintext = "nf_" + secrets.token_urlsafe(32)
        with self.db.session() as s:
            row = s.scalar(select(ApiTokenRow).where(ApiTokenRow.name == name))
            if row is not None and row.revoked_at is None:
                raise ValueError(f"an active token named {name!r} exists; revoke it first")
            if row is None:
                row = ApiTokenRow(name=name)
                s.add(row)
            row.token_hash = _token_hash(plaintext)
            row.scopes = list(scopes)
            row.created_at = utcnow()
            row.revoked_at = None
        return plaintext

    def verify_token(self, plaintext: str, scope: str | None = None) -> bool:
        """True for an active token (holding ``scope`` when one is asked for)."""
        if not plaintext:
            return False
        with self.db.session(readonly=True) as s:
            row = s.scalar(
                select(ApiTokenRow).where(
                    ApiTokenRow.token_hash == _token_hash(plaintext),
                    ApiTokenRow.revoked_at.is_(None),
                )
            )
            return row is not None and (scope is None or scope in (row.scopes or []))

    def token_name(self, plaintext: str, scope: str | None = None) -> str | None:
        """The name of the active token ``plaintext`` (holding ``scope`` if one is asked for),
        or None; one indexed read on a plain connection (it runs on every write request)."""
        if not plaintext:
            return None
        t = ApiTokenRow.__table__
        q = select(t.c.name, t.c.scopes).where(
            t.c.token_hash == _token_hash(plaintext), t.c.revoked_at.is_(None)
        )
        with self.db.read() as conn:
            row = conn.execute(q).first()
        if row is None or (scope is not None and scope not in (row.scopes or [])):
            return None
        return str(row.name)

    def revoke_token(self, name: str) -> bool:
        """Revoke the active token named ``name``; False if there was none."""
        with self.db.session() as s:
            res = s.execute(
                update(ApiTokenRow)
                .where(ApiTokenRow.name == name, ApiTokenRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return res.rowcount == 1

    def list_tokens(self) -> list[dict[str, Any]]:
        """Token names, scopes and times (never hashes)."""
        with self.db.session(readonly=True) as s:
            return [
                {
                    "name": r.name,
                    "scopes": r.scopes or [],
                    "created_at": _iso(r.created_at),
                    "revoked_at": _iso(r.revoked_at),
                }
                for r in s.scalars(select(ApiTokenRow).order_by(ApiTokenRow.name))
            ]

    # -- leaderboard -------------------------------------------------------------------------

    def leaderboard(
        self,
        proxy: str,
        *,
        group: str | None = None,
        properties: Mapping[str, Any] | None = None,
        study_id: int | None = None,
        metric: str | None = None,
        direction: stats.Direction | None = None,
        alpha: float = stats.ALPHA,
        from_scratch: bool = False,
    ) -> list[dict[str, Any]]:
        """Ranked arms of ``proxy``: one row per arm (config without seed), over its seeds.

        Values are the trials' objective (or ``metric`` from their final metrics) of COMPLETE
        trials; one value per seed (the latest trial when several studies ran the same seed).
        Ranking is by the lower 95% t bound (upper when minimising), see ``storage.stats``.
        ``group`` / ``properties`` filter on the candidate's stored group and properties
        (baselines without a candidate row are in group ``"baseline"``).

        Row keys: ``rank``, ``arm_key``, ``candidate``, ``norm``, ``axis_values``, ``overrides``,
        ``group``, ``properties``, ``objective``, ``direction``, ``n`` (seeds with a value),
        ``n_trials`` (finished trials), ``n_diverged``, ``n_failed``, ``n_pruned``, ``mean``,
        ``std``, ``ci_half_width``, ``ci_low``, ``ci_high``, ``bound``, ``seeds``,
        ``p_vs_best`` (Welch), ``indistinguishable_from_best``, ``vs_layernorm`` (None or
        ``{n_pairs, seeds, mean_diff, std, ci_half_width, ci_low, ci_high}`` of candidate minus
        LayerNorm on shared seeds), ``study_ids``.

        Read from the per-arm summaries (``storage.aggregates``: one row per arm, whatever the
        number of trials); ``study_id`` and ``metric`` boards group trials instead, and
        ``from_scratch=True`` recomputes everything from the trials (the reference the contract
        tests compare with). Both give identical rows.
        """
        return boards.leaderboard(
            self.db,
            proxy,
            group=group,
            properties=properties,
            study_id=study_id,
            metric=metric,
            direction=direction,
            alpha=alpha,
            from_scratch=from_scratch,
        )


def _unpack(item: Any) -> tuple[TrialConfig, Mapping[str, Any] | None, int | None]:
    if isinstance(item, TrialConfig):
        return item, None, None
    parts = tuple(item)
    if not parts or not isinstance(parts[0], TrialConfig) or len(parts) > 3:
        raise TypeError(f"expected TrialConfig or (config, axis_values, optuna_number): {item!r}")
    return (parts[0], parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None)


def _chunks(seq: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _epoch_values(trial_id: int, r: EpochRecord) -> dict[str, Any]:
    return {
        "trial_id": trial_id,
        "epoch": r.epoch,
        "step": r.step,
        "train_loss": r.train_loss,
        "val_loss": r.val_loss,
        "metrics": _jsonable(r.metrics),
        "lr": r.lr,
        "wall_time": r.wall_time_s,
    }


def _last_per_epoch(curves: Sequence[EpochRecord]) -> list[EpochRecord]:
    return list({r.epoch: r for r in curves}.values())
