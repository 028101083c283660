"""SQLAlchemy 2 typed models: the schema Alembic migrates to (head).

Why these tables: a candidate is a formula with its derived facts; a study is a spec plus a
status; a trial is one ``TrialConfig`` run (one seed) with its lease and its result; curves and
per-layer diagnostics are separate narrow tables because a trial has hundreds of them and the
leaderboard never reads them. JSON columns hold what is only ever read whole (specs, metrics);
everything a query filters or groups by is a real, indexed column.

Keep this file and ``migrations/versions`` in step: ``tests/storage/test_migrations.py`` compares
the migrated schema with these models and fails on drift.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy import false as sa_false
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Constraint names are fixed so migrations (and SQLite batch mode) can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Timezone-aware now in UTC: the only clock storage uses."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored as UTC and always returned timezone-aware.

    SQLite has no timezone type and hands back naive datetimes; PostgreSQL returns aware ones.
    Normalising both ways means lease arithmetic never mixes naive and aware values.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        # SQLite compares timestamps as text: store them naive so the text sorts by time.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class FiniteFloat(TypeDecorator[float]):
    """A float column that stores NaN and +-inf as NULL.

    A diverging trial reports NaN/inf losses. SQLite silently turns NaN into NULL (and then a
    NOT NULL column fails), PostgreSQL would keep it, and JSON (the API) has no NaN at all: so
    every backend stores "not a finite number" the same way, as NULL, read back as None.
    """

    impl = Float
    cache_ok = True

    def process_bind_param(self, value: float | None, dialect: Any) -> float | None:
        if value is None:
            return None
        value = float(value)
        return value if math.isfinite(value) else None


# JSONB on PostgreSQL (indexable, compact), plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012
        dict[str, Any]: JSONType,
        list[Any]: JSONType,
        datetime: UTCDateTime,
        float: FiniteFloat,
    }


class CandidateRow(Base):
    """A norm function: user-submitted or from the catalog (one row per unique name)."""

    __tablename__ = "candidates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    formula: Mapped[str | None] = mapped_column(Text)
    canonical: Mapped[str | None] = mapped_column(Text)
    # SHA-256 of ``canonical``, unique: a submission claims its function with one INSERT, so two
    # names for one formula cannot both be stored (storage.candidates.claim_candidate). Upserts
    # (catalog, generate) fill it too; NULL where another row holds the function already.
    canonical_key: Mapped[str | None] = mapped_column(String(64), unique=True, index=True)
    # Hash of values on a probe grid: two names with one fingerprint are the same function.
    fingerprint: Mapped[str | None] = mapped_column(String(64), index=True)
    properties: Mapped[dict[str, Any]] = mapped_column(default=dict)
    lineage: Mapped[dict[str, Any]] = mapped_column(default=dict)
    group: Mapped[str | None] = mapped_column(String(100), index=True)
    citation: Mapped[str | None] = mapped_column(Text)
    submitter: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The submission's prescreen (api.submissions): {"status": "pending"|"done"|"failed", ...};
    # NULL when none was asked for. Written after the answer, so every API worker can show it.
    prescreen: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    # The process running a pending prescreen and since when (storage.candidates
    # .claim_prescreen): of N server processes re-queueing at start, only the claimant runs it.
    prescreen_claimed_by: Mapped[str | None] = mapped_column(String(200))
    prescreen_claimed_at: Mapped[datetime | None] = mapped_column()
    # Hidden from the candidate list while set (``?archived=true`` shows it); NULL: shown.
    archived_at: Mapped[datetime | None] = mapped_column()
    # The API token that submitted it: only it or an admin token may archive or delete it.
    # NULL: a catalog or generated row, or one older than migration 0010 (admin tokens only).
    owner_token_id: Mapped[int | None] = mapped_column(Integer)


class StudyRow(Base):
    """A study: its ``StudySpec`` (JSON), status, and the name of its Optuna study."""

    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))
    name: Mapped[str | None] = mapped_column(String(200))
    proxy: Mapped[str] = mapped_column(String(100))
    spec: Mapped[dict[str, Any]] = mapped_column()
    status: Mapped[str] = mapped_column(String(20), default="pending")
    optuna_study_name: Mapped[str | None] = mapped_column(String(200), unique=True)
    # The API token that created it (api_tokens.id): only it or an admin token may control it.
    # NULL: made by the CLI or before migration 0009 (admin tokens only, through the API).
    owner_token_id: Mapped[int | None] = mapped_column(Integer, index=True)
    # Set when the finished study is archived: it leaves lists and leaderboards (its trials stop
    # counting in ``arm_results``) but keeps every row, so it can be restored. NULL: shown.
    archived_at: Mapped[datetime | None] = mapped_column()
    # Short labels the list filters by, and a free-text note (``normfree study tag|note``).
    tags: Mapped[list[Any]] = mapped_column(default=list, server_default="[]")
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    trials: Mapped[list[TrialRow]] = relationship(back_populates="study", passive_deletes=True)


class TrialRow(Base):
    """One run of one ``TrialConfig`` (one seed): its lease while running, its result after.

    ``trial_key`` is ``TrialConfig.key()`` (the seed is part of it); ``arm_key`` is the same hash
    without the seed, so the leaderboard aggregates the seeds of one arm; ``context_key`` also
    drops the norm, so a candidate is paired with LayerNorm trained in the same setting.
    """

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("study_id", "trial_key"),
        # Leaderboards: trials of a proxy in a status, per candidate.
        Index("ix_trials_leaderboard", "proxy", "status", "candidate"),
        # Study progress pages: counts per status of one study.
        Index("ix_trials_study_status", "study_id", "status"),
        # Leasing and requeueing: the oldest WAITING trial, RUNNING trials past their lease.
        Index("ix_trials_lease", "status", "lease_expires_at"),
        Index("ix_trials_context_seed", "context_key", "seed"),
        # Reuse: a planned trial key looked up across every study (migration 0011).
        Index("ix_trials_reuse", "trial_key", "code_version"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    trial_key: Mapped[str] = mapped_column(String(64))
    arm_key: Mapped[str] = mapped_column(String(64))
    context_key: Mapped[str] = mapped_column(String(64))
    proxy: Mapped[str] = mapped_column(String(100))
    candidate: Mapped[str] = mapped_column(String(200))  # NormSpec.name
    norm: Mapped[dict[str, Any]] = mapped_column()  # NormSpec as JSON
    axis_values: Mapped[dict[str, Any]] = mapped_column(default=dict)
    seed: Mapped[int] = mapped_column(Integer)
    config: Mapped[dict[str, Any]] = mapped_column()  # the whole TrialConfig as JSON
    status: Mapped[str] = mapped_column(String(20), default="WAITING")
    # attempt counts every lease (a fencing token: a stale worker's writes name an old attempt);
    # releases counts leases handed back uncharged (pause). Retries are bounded by the difference.
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    releases: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column()
    optuna_number: Mapped[int | None] = mapped_column(Integer)
    objective: Mapped[str | None] = mapped_column(String(100))
    direction: Mapped[str | None] = mapped_column(String(10))
    objective_value: Mapped[float | None] = mapped_column(FiniteFloat)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    eval_train_loss: Mapped[float | None] = mapped_column(FiniteFloat)
    diverged_at_step: Mapped[int | None] = mapped_column(Integer)
    # first loss-spike step (a divergence counts as one); NULL: none, or before migration 0005
    spike_step: Mapped[int | None] = mapped_column(Integer)
    # why a DIVERGED trial failed to train (non-finite loss, blow-up, no learning); NULL before 0007
    failure: Mapped[str | None] = mapped_column(String(300))
    train_time_s: Mapped[float | None] = mapped_column(FiniteFloat)
    total_time_s: Mapped[float | None] = mapped_column(FiniteFloat)
    # The trainer's code version that produced the result (``TrialResult.code_version``);
    # a finished trial is reused only by a study planning the same key under the same version.
    code_version: Mapped[str | None] = mapped_column(String(64))
    # The trial whose result this row carries (copied when the study was planned: never trained
    # here). Not a foreign key: the copy keeps its meaning if that study is deleted.
    reused_from: Mapped[int | None] = mapped_column(Integer)
    worker: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    # The finished trial as ``storage.reads.trial_detail`` returns it (JSON text), written in
    # the transaction that finishes it: a trial page then costs one row read whatever its
    # curves and diagnostics hold. It carries its ``updated_at``; a later write to the row moves
    # that (``onupdate``), and a document whose stamp differs from the row's is never used.
    document: Mapped[str | None] = mapped_column(Text, deferred=True)
    # Its arm was archived in its study (or the study was): it counts on no leaderboard. Kept
    # per trial so the arm summaries skip it while folding, with no join (migration 0010).
    archived: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())

    study: Mapped[StudyRow] = relationship(back_populates="trials")
    curves: Mapped[list[TrialMetricRow]] = relationship(
        order_by="TrialMetricRow.epoch", passive_deletes=True
    )
    diagnostics: Mapped[list[TrialDiagnosticRow]] = relationship(
        order_by="[TrialDiagnosticRow.epoch, TrialDiagnosticRow.layer]", passive_deletes=True
    )


class TrialMetricRow(Base):
    """One learning-curve point (one ``EpochRecord``)."""

    __tablename__ = "trial_metrics"
    __table_args__ = (UniqueConstraint("trial_id", "epoch"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    train_loss: Mapped[float | None] = mapped_column(FiniteFloat)  # None: not finite (diverged)
    val_loss: Mapped[float | None] = mapped_column(FiniteFloat)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    lr: Mapped[float] = mapped_column(FiniteFloat)
    wall_time: Mapped[float] = mapped_column(FiniteFloat)


class TrialDiagnosticRow(Base):
    """One ``LayerDiagnostic``: a norm slot's parameters and activations at one epoch."""

    __tablename__ = "trial_diagnostics"
    __table_args__ = (UniqueConstraint("trial_id", "epoch", "layer"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    layer: Mapped[str] = mapped_column(String(200))
    alpha: Mapped[float | None] = mapped_column(FiniteFloat)
    s_mean: Mapped[float | None] = mapped_column(FiniteFloat)
    gamma_mean: Mapped[float | None] = mapped_column(FiniteFloat)
    gamma_std: Mapped[float | None] = mapped_column(FiniteFloat)
    beta_mean: Mapped[float | None] = mapped_column(FiniteFloat)
    beta_std: Mapped[float | None] = mapped_column(FiniteFloat)
    input_std: Mapped[float | None] = mapped_column(FiniteFloat)
    input_absmax: Mapped[float | None] = mapped_column(FiniteFloat)
    branch_norm: Mapped[float | None] = mapped_column(FiniteFloat)
    grad_norm: Mapped[float | None] = mapped_column(FiniteFloat)
    extra: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ArmResultRow(Base):
    """The finished trials of one arm on one proxy, summarised (``storage.aggregates``).

    Kept in the transaction that finishes a trial, so a leaderboard reads one row per arm instead
    of every trial. It holds what the leaderboard statistics need and nothing they could not be
    recomputed from: counts per status, the latest value of each seed (``seeds``: ``{"seed":
    [value, order]}``), the first finished trial's norm, axes and overrides, the first objective
    and the last direction. ``*_order`` are ``aggregates.order_key`` strings (finish time, then
    id): the order the trials of an arm are read in from scratch.
    """

    __tablename__ = "arm_results"
    __table_args__ = (
        UniqueConstraint("proxy", "arm_key"),
        # LayerNorm pairing: the reference arms of one context.
        Index("ix_arm_results_context", "proxy", "context_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    proxy: Mapped[str] = mapped_column(String(100))
    arm_key: Mapped[str] = mapped_column(String(64))
    context_key: Mapped[str] = mapped_column(String(64))
    candidate: Mapped[str] = mapped_column(String(200))
    first_order: Mapped[str] = mapped_column(String(40))
    norm: Mapped[dict[str, Any]] = mapped_column()
    axis_values: Mapped[dict[str, Any]] = mapped_column(default=dict)
    overrides: Mapped[dict[str, Any]] = mapped_column(default=dict)
    objective: Mapped[str | None] = mapped_column(String(100))
    objective_order: Mapped[str | None] = mapped_column(String(40))
    direction: Mapped[str | None] = mapped_column(String(10))
    direction_order: Mapped[str | None] = mapped_column(String(40))
    n_trials: Mapped[int] = mapped_column(Integer, default=0)
    n_diverged: Mapped[int] = mapped_column(Integer, default=0)
    n_failed: Mapped[int] = mapped_column(Integer, default=0)
    n_pruned: Mapped[int] = mapped_column(Integer, default=0)
    seeds: Mapped[dict[str, Any]] = mapped_column(default=dict)
    study_ids: Mapped[list[Any]] = mapped_column(default=list)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ReadVersionRow(Base):
    """A counter per cached read (``proxy:<name>``, ``candidates``), bumped in the transaction
    that changes what the read shows; the API keys its response cache and ETags on it."""

    __tablename__ = "read_versions"

    scope: Mapped[str] = mapped_column(String(250), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


class FunctionAnalysisRow(Base):
    """A function's group and properties as ``search_space.catalog.describe`` gave them under
    a catalog code ``version`` (``workers.versions.catalog_version``): 50-300 ms of sympy per
    name that a server would otherwise redo for every arm after each start (``api.enrich``).
    ``info`` is the analysis as JSON text (NULL: not a catalog function); text, not JSONB,
    because a property may be infinite, which JSON columns refuse."""

    __tablename__ = "function_analyses"

    version: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)  # trials.candidate
    info: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiTokenRow(Base):
    """An API write token; only its SHA-256 is stored, the plaintext is shown once."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # One of "read" < "write" < "admin" (a list for history: the highest one counts).
    scopes: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column()
    expires_at: Mapped[datetime | None] = mapped_column()  # NULL: never


class ReferenceSetRow(Base):
    """A reference set: published at-scale results a proxy's fidelity is measured against."""

    __tablename__ = "reference_sets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    title: Mapped[str] = mapped_column(String(300), default="")
    source: Mapped[str] = mapped_column(Text)  # the citation(s)
    description: Mapped[str] = mapped_column(Text, default="")
    builtin: Mapped[bool] = mapped_column(Boolean, default=False)
    submitter: Mapped[str | None] = mapped_column(String(200))
    # The API token that imported it: only it or an admin token may replace or delete it.
    owner_token_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    rows: Mapped[list[ReferenceEntryRow]] = relationship(
        order_by="ReferenceEntryRow.position", passive_deletes=True
    )


class ReferenceEntryRow(Base):
    """One published outcome: a setting, a cell (function + options), a value or a failure.

    ``cell_key`` is what the cell computes (fidelity.reference.cell_key), so ``shift_h(erf, 0)``
    and ``erf`` are one cell; a setting holds a cell once.
    """

    __tablename__ = "reference_rows"
    __table_args__ = (UniqueConstraint("set_id", "setting", "cell_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    set_id: Mapped[int] = mapped_column(ForeignKey("reference_sets.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)  # order of the rows as imported
    setting: Mapped[str] = mapped_column(String(200))
    family: Mapped[str] = mapped_column(String(10))
    metric: Mapped[str] = mapped_column(String(20))
    direction: Mapped[str] = mapped_column(String(10))
    resolution: Mapped[float] = mapped_column(FiniteFloat)
    function: Mapped[str] = mapped_column(String(300))
    shift: Mapped[str] = mapped_column(String(10), default="none")
    alpha: Mapped[float | None] = mapped_column(FiniteFloat)  # NULL: learnable
    cell_key: Mapped[str] = mapped_column(String(200))
    value_low: Mapped[float | None] = mapped_column(FiniteFloat)
    value_high: Mapped[float | None] = mapped_column(FiniteFloat)
    failed: Mapped[bool] = mapped_column(Boolean, default=False)
    note: Mapped[str] = mapped_column(Text, default="")
