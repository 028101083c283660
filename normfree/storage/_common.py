"""What every part of the repository shares: row-to-dict conversions, keys, constants, and the
base class holding the database handle (:class:`RepositoryBase`).

The repository is split by aggregate (``candidates``, ``studies``, ``trials``, ``tokens``); each
part is a class over this base, and :class:`normfree.storage.Repository` is all of them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from normfree.specs import (
    EpochRecord,
    TrialConfig,
)
from normfree.storage import leaderboard as boards
from normfree.storage.db import Database
from normfree.storage.models import (
    CandidateRow,
    StudyRow,
)
from normfree.storage.records import CandidateRecord, StudyRecord

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


def where_equal(query: Any, model: Any, **filters: Any) -> Any:
    """``query`` narrowed to rows whose columns equal the given values (None: no filter)."""
    for column, value in filters.items():
        if value is not None:
            query = query.where(getattr(model, column) == value)
    return query


def _columns(row: Any, names: str) -> dict[str, Any]:
    """The named attributes of an ORM row, as they are (``names``: space-separated)."""
    return {name: getattr(row, name) for name in names.split()}


def _candidate_dict(row: CandidateRow) -> CandidateRecord:
    out = {
        **_columns(row, "id name formula canonical fingerprint lineage group citation submitter"),
        "properties": row.properties or {},
        "created_at": _iso(row.created_at),
        "prescreen": row.prescreen,
        "archived_at": _iso(getattr(row, "archived_at", None)),
        "owner_token_id": getattr(row, "owner_token_id", None),
    }
    # NOT NULL JSON columns: None is text that was not JSON (``db.tolerant_json_loads``); named
    # so that the API can say it could not read them (``api.services.candidates``)
    lost = [f for f in ("properties", "lineage") if getattr(row, f) is None]
    if lost:
        out["unreadable"] = lost
    return out


def _study_dict(row: StudyRow) -> StudyRecord:
    return {
        **_columns(row, "id kind name proxy spec status optuna_study_name owner_token_id note"),
        "tags": list(row.tags) if isinstance(row.tags, list) else [],
        "archived_at": _iso(row.archived_at),
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
    }


def _trial_dict(
    row: Any,
    details: bool = False,
    *,
    curves: Sequence[Any] | None = None,
    diagnostics: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """A trial as a dict, from an ORM ``TrialRow`` or a Core row of ``trials`` (same names);
    with ``details``, its curves and diagnostics (given, or the ORM row's relationships)."""
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
        "code_version": row.code_version,
        "reused_from": row.reused_from,
        "created_at": _iso(row.created_at),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
    }
    # NOT NULL JSON columns: None is text that was not JSON (``db.tolerant_json_loads``)
    lost = [f for f in ("axis_values", "metrics", "config") if getattr(row, f) is None]
    if details:
        curves = row.curves if curves is None else curves
        diagnostics = row.diagnostics if diagnostics is None else diagnostics
        # shown empty and named, so that the trial's page and JSON say what they could not read
        unreadable = lost + [
            f"curve metrics (epoch {m.epoch})" for m in curves if m.metrics is None
        ]
        unreadable += [
            f"diagnostic extras (epoch {d.epoch}, {d.layer})"
            for d in diagnostics
            if d.extra is None
        ]
        if unreadable:
            out["unreadable"] = unreadable
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
            for m in curves
        ]
        out["diagnostics"] = [
            {
                "epoch": d.epoch,
                "layer": d.layer,
                **{f: getattr(d, f) for f in DIAGNOSTIC_FIELDS},
                "extra": d.extra or {},
            }
            for d in diagnostics
        ]
    return out


def _token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


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


class RepositoryBase:
    """The database handle and the retry bound every repository part works with."""

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
