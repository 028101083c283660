"""Reference sets in the database, and the trial rows a fidelity report reads.

A reference set is written whole in one transaction or not at all (``put``): it is validated
first (:mod:`normfree.fidelity.reference`, every cell resolved through the catalog), and a name
that exists is refused unless ``replace=True``. The built-in set (science.md section 7) is kept
in step with the code by :meth:`ReferenceStore.ensure_builtin`, which ``normfree serve`` and the
CLI call after migrating.

:meth:`ReferenceStore.proxy_trials` turns a proxy's (or one study's) finished trials into
:class:`~normfree.fidelity.report.ProxyTrial` rows. For a proxy it reads only trials run in the
preset's own setting (no overrides, the preset's dataset, epochs and learning rate), so a study
that changed the recipe does not speak for the preset; for a study it reads the setting most of
the study's trials share. It groups by arm first and loads trials only of arms whose cell a
reference row can match, so its cost follows the arms, not the trials, of a proxy.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import joinedload

from normfree.fidelity.published import NAME as BUILTIN_NAME
from normfree.fidelity.published import published
from normfree.fidelity.reference import Cell, ReferenceRow, ReferenceSet, cell_key, norm_cell_key
from normfree.fidelity.report import ProxyTrial, fd_score
from normfree.specs import TRAINED_STATUSES, NormSpec, TrialConfig
from normfree.storage import aggregates
from normfree.storage.db import Database
from normfree.storage.models import ReferenceEntryRow, ReferenceSetRow, TrialRow

# Per database, the stamp (row id, creation time) of the built-in set this process last found
# current: checking it reads and validates every row (27 ms, most of a references read on a
# busy server), while the stamp is one indexed row; any rewrite of the set gives a new stamp.
_BUILTIN_CURRENT: weakref.WeakKeyDictionary[Database, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def builtin_checked(db: Database) -> bool:
    """Whether this process has checked ``db``'s built-in set (:meth:`ensure_builtin`)."""
    return db in _BUILTIN_CURRENT


# The read version (``storage.aggregates.bump``) every write of a set moves: cached lists key on it.
READ_SCOPE = "references"


class ReferenceExists(ValueError):
    """A reference set of that name is stored already (pass replace=True to overwrite)."""


class ReferenceForbidden(PermissionError):
    """The set belongs to another token (or is built in): the caller may not replace or delete
    it. Only its owner or an admin may; a set with no owner (imported before migration 0009 or
    by the CLI) only an admin."""


def _set_dict(row: ReferenceSetRow, n_rows: int, settings: list[str]) -> dict[str, Any]:
    return {
        "name": row.name,
        "title": row.title,
        "source": row.source,
        "description": row.description,
        "builtin": row.builtin,
        "submitter": row.submitter,
        "created_at": row.created_at.isoformat() if row.created_at else None,
        "n_rows": n_rows,
        "settings": settings,
    }


def _check_owner(row: ReferenceSetRow, owner_token_id: int | None, admin: bool) -> None:
    if admin or (row.owner_token_id is not None and row.owner_token_id == owner_token_id):
        return
    raise ReferenceForbidden(
        f"reference set {row.name!r} belongs to another token; only the token that imported "
        "it, or an admin token, may replace or delete it"
    )


def _row_values(set_id: int, position: int, r: ReferenceRow, key: str) -> dict[str, Any]:
    return {
        "set_id": set_id,
        "position": position,
        "setting": r.setting,
        "family": r.family,
        "metric": r.metric,
        "direction": r.direction,
        "resolution": r.resolution,
        "function": r.cell.function,
        "shift": r.cell.shift,
        "alpha": r.cell.alpha,
        "cell_key": key,
        "value_low": r.value_low,
        "value_high": r.value_high,
        "failed": r.failed,
        "note": r.note,
    }


def _read_set(s: Any, name: str) -> ReferenceSetRow | None:
    """The set named ``name`` with its rows, in one statement: read as two (the set, then its
    rows), a set replaced between them by another transaction read as a set of no rows on
    PostgreSQL (each statement sees its own snapshot there), and its validation failed (a 500
    when twenty imports of one set raced)."""
    stmt = (
        select(ReferenceSetRow)
        .options(joinedload(ReferenceSetRow.rows))
        .where(ReferenceSetRow.name == name)
    )
    return s.scalars(stmt).unique().first()


def _to_model(row: ReferenceSetRow) -> ReferenceSet:
    return ReferenceSet.model_validate(
        {
            "name": row.name,
            "title": row.title,
            "source": row.source,
            "description": row.description,
            "rows": [
                {
                    "setting": e.setting,
                    "family": e.family,
                    "metric": e.metric,
                    "direction": e.direction,
                    "resolution": e.resolution,
                    "cell": {"function": e.function, "shift": e.shift, "alpha": e.alpha},
                    "value_low": e.value_low,
                    "value_high": e.value_high,
                    "failed": e.failed,
                    "note": e.note,
                }
                for e in row.rows
            ],
        }
    )


def default_context_key(proxy: str) -> str:
    """The context key of a trial run in the preset's own setting (storage.context_key)."""
    from normfree.storage.repository import context_key

    return context_key(TrialConfig(proxy=proxy, norm=NormSpec(name="layernorm")))


def arm_label(norm: dict[str, Any]) -> str:
    """How a trial's norm is shown in a report: the name plus options that change the cell."""
    cell = Cell(
        function=str(norm.get("name", "?"))[:300] or "?",
        shift=norm.get("shift", "none"),
        alpha=None if norm.get("learn_alpha", True) else float(norm.get("alpha0", 0.5)),
    )
    return cell.label


class ReferenceStore:
    """Reference sets and fidelity inputs over one :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # ------------------------------------------------------------------------ reference sets
    def put(
        self,
        ref: ReferenceSet,
        *,
        submitter: str | None = None,
        replace: bool = False,
        builtin: bool = False,
        owner_token_id: int | None = None,
        admin: bool = True,
        cell_keys: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Store ``ref`` (validated) in one transaction; returns its summary.

        ``cell_keys``: each row's :func:`cell_key`, when the caller has them (a set parsed in a
        worker process, ``api.offload``): computing one parses the row's formula, which in the
        server's process holds the GIL (a second for a few long formulas).

        ``ReferenceExists`` when the name is taken and ``replace`` is False; the built-in set
        can only be replaced by :meth:`ensure_builtin`. ``owner_token_id``: the token importing
        it (recorded); replacing a set of another token raises ``ReferenceForbidden`` unless
        ``admin`` (the default: the CLI and internal callers).
        """
        keys = list(cell_keys) if cell_keys is not None else [cell_key(r.cell) for r in ref.rows]
        if len(keys) != len(ref.rows):
            raise ValueError(f"{len(keys)} cell keys for {len(ref.rows)} rows")
        if builtin:
            _BUILTIN_CURRENT.pop(self.db, None)
        with self.db.session() as s:
            old = s.scalar(select(ReferenceSetRow).where(ReferenceSetRow.name == ref.name))
            if old is not None:
                if not replace or (old.builtin and not builtin):
                    raise ReferenceExists(
                        f"reference set {ref.name!r} exists"
                        + ("" if old.builtin else "; replace it explicitly")
                        + (" (it is built in)" if old.builtin else "")
                    )
                _check_owner(old, owner_token_id, admin)
                s.execute(delete(ReferenceSetRow).where(ReferenceSetRow.id == old.id))
                s.flush()
            row = ReferenceSetRow(
                name=ref.name,
                title=ref.title,
                source=ref.source,
                description=ref.description,
                builtin=builtin,
                submitter=submitter,
                owner_token_id=owner_token_id,
            )
            s.add(row)
            try:
                s.flush()
            except IntegrityError:  # a concurrent import of the same name won
                raise ReferenceExists(f"reference set {ref.name!r} exists") from None
            s.execute(
                ReferenceEntryRow.__table__.insert(),
                [
                    _row_values(row.id, i, r, k)
                    for i, (r, k) in enumerate(zip(ref.rows, keys, strict=True))
                ],
            )
            aggregates.bump(s, READ_SCOPE)
            return _set_dict(row, len(ref.rows), ref.settings())

    def delete(
        self,
        name: str,
        *,
        owner_token_id: int | None = None,
        admin: bool = True,
        dry_run: bool = False,
    ) -> bool:
        """Remove a set and its rows; False when there is none. The built-in set cannot be
        removed (``ReferenceExists``), another token's only by an admin (``ReferenceForbidden``).
        ``dry_run``: every check, nothing removed (a delete's preview)."""
        with self.db.session() as s:
            old = s.scalar(select(ReferenceSetRow).where(ReferenceSetRow.name == name))
            if old is None:
                return False
            if old.builtin:
                raise ReferenceExists(f"reference set {name!r} is built in; it cannot be deleted")
            _check_owner(old, owner_token_id, admin)
            if dry_run:
                return True
            s.execute(delete(ReferenceSetRow).where(ReferenceSetRow.id == old.id))
            aggregates.bump(s, READ_SCOPE)
            return True

    def ensure_builtin(self) -> None:
        """Store the built-in set, or refresh it when the code's rows changed (idempotent).
        While the stored set is the one this process last found current: one small read."""
        seen = _BUILTIN_CURRENT.get(self.db)
        if seen is not None and seen == self._builtin_stamp():
            return
        ref = published()
        current = self.get(BUILTIN_NAME)
        if current is None or current != ref:
            # another process may store it between our read and write: then theirs stands
            # (a set none was found of is added, never put over one stored meanwhile: twenty
            # imports at once replaced each other's new set under their readers)
            with contextlib.suppress(ReferenceExists):
                self.put(ref, replace=current is not None, builtin=True)
        stamp = self._builtin_stamp()
        if stamp is not None:
            _BUILTIN_CURRENT[self.db] = stamp

    def _builtin_stamp(self) -> tuple[Any, ...] | None:
        with self.db.session(readonly=True) as s:
            row = s.execute(
                select(ReferenceSetRow.id, ReferenceSetRow.created_at).where(
                    ReferenceSetRow.name == BUILTIN_NAME, ReferenceSetRow.builtin.is_(True)
                )
            ).first()
        return None if row is None else tuple(row)

    def get(self, name: str) -> ReferenceSet | None:
        with self.db.session(readonly=True) as s:
            row = _read_set(s, name)
            return None if row is None else _to_model(row)

    def describe(self, name: str) -> dict[str, Any] | None:
        """A set's summary plus its rows (JSON-ready)."""
        with self.db.session(readonly=True) as s:
            row = _read_set(s, name)
            if row is None:
                return None
            ref = _to_model(row)
            out = _set_dict(row, len(ref.rows), ref.settings())
        out["rows"] = [
            {**r.model_dump(mode="json"), "cell_label": r.cell.label, "value": r.value}
            for r in ref.rows
        ]
        return out

    def list(self) -> list[dict[str, Any]]:
        with self.db.session(readonly=True) as s:
            counts = dict(
                s.execute(
                    select(ReferenceEntryRow.set_id, func.count()).group_by(
                        ReferenceEntryRow.set_id
                    )
                ).all()
            )
            settings: dict[int, list[str]] = {}
            for set_id, setting in s.execute(
                select(ReferenceEntryRow.set_id, ReferenceEntryRow.setting).order_by(
                    ReferenceEntryRow.set_id, ReferenceEntryRow.position
                )
            ):
                lst = settings.setdefault(set_id, [])
                if setting not in lst:
                    lst.append(setting)
            rows = s.scalars(
                select(ReferenceSetRow).order_by(
                    ReferenceSetRow.builtin.desc(), ReferenceSetRow.name
                )
            )
            return [_set_dict(r, counts.get(r.id, 0), settings.get(r.id, [])) for r in rows]

    # ----------------------------------------------------------------------- fidelity inputs
    def proxy_trials(
        self,
        *,
        proxy: str | None = None,
        study_id: int | None = None,
        cell_keys: Iterable[str] | None = None,
        near_chance: Callable[[dict[str, Any] | None], bool] | None = None,
    ) -> tuple[list[ProxyTrial], dict[str, Any]]:
        """Finished trials (COMPLETE / DIVERGED) as report rows, and what they cover.

        Exactly one of ``proxy`` (the preset's own setting) or ``study_id`` (the study's main
        setting). ``cell_keys`` limits the trials loaded to arms of those cells.
        ``near_chance`` (of a trial's metrics) marks a completed trial failed to train too
        (``fidelity.caveats.near_chance_rule``: the preset's trainer may not have).
        """
        if (proxy is None) == (study_id is None):
            raise ValueError("give a proxy or a study, not both")
        wanted = set(cell_keys) if cell_keys is not None else None
        finished = TRAINED_STATUSES
        with self.db.session(readonly=True) as s:
            q = select(TrialRow.context_key, TrialRow.proxy, func.count()).where(
                TrialRow.status.in_(finished)
            )
            # a proxy's report leaves archived studies and arms out, as its leaderboard does
            shown = aggregates.shown_trials(TrialRow.archived, TrialRow.study_id) if proxy else []
            if proxy is not None:
                ctx = default_context_key(proxy)
                q = q.where(TrialRow.context_key == ctx, TrialRow.proxy == proxy, *shown)
            else:
                q = q.where(TrialRow.study_id == study_id)
            contexts = s.execute(q.group_by(TrialRow.context_key, TrialRow.proxy)).all()
            if not contexts:
                return [], {"proxy": proxy, "study_id": study_id, "context_key": None, "trials": 0}
            ctx, ctx_proxy, _ = max(contexts, key=lambda c: (c[2], c[0]))
            base = [TrialRow.context_key == ctx, TrialRow.status.in_(finished), *shown]
            if study_id is not None:
                base.append(TrialRow.study_id == study_id)
            # one representative trial per arm: its norm decides the arm's cell
            reps = s.execute(
                select(TrialRow.arm_key, func.min(TrialRow.id))
                .where(*base)
                .group_by(TrialRow.arm_key)
            ).all()
            rep_ids = [r[1] for r in reps]
            norms: dict[str, dict[str, Any]] = {}
            for chunk in _chunks(rep_ids, 500):
                for arm, norm in s.execute(
                    select(TrialRow.arm_key, TrialRow.norm).where(TrialRow.id.in_(chunk))
                ):
                    norms[arm] = norm
            cells: dict[str, str] = {}
            by_json: dict[str, str | None] = {}
            for arm, norm in norms.items():
                text = json.dumps(norm, sort_keys=True)
                if text not in by_json:
                    by_json[text] = norm_cell_key(norm)
                key = by_json[text]
                if key is not None and (wanted is None or key in wanted):
                    cells[arm] = key
            out: list[ProxyTrial] = []
            cols = (
                TrialRow.arm_key,
                TrialRow.norm,
                TrialRow.seed,
                TrialRow.status,
                TrialRow.objective_value,
                TrialRow.direction,
                TrialRow.eval_train_loss,
                TrialRow.metrics,
            )
            for chunk in _chunks(sorted(cells), 500):
                rows = s.execute(
                    select(*cols)
                    .where(*base, TrialRow.arm_key.in_(chunk))
                    .order_by(TrialRow.finished_at, TrialRow.id)
                )
                for arm, norm, seed, status, value, direction, etl, metrics in rows:
                    out.append(
                        ProxyTrial(
                            cell=cells[arm],
                            label=arm_label(norm),
                            seed=seed,
                            failed=status == "DIVERGED"
                            or (near_chance is not None and near_chance(metrics)),
                            objective=value,
                            objective_direction=direction or "maximize",
                            eval_train_loss=etl,
                            fd=fd_score(metrics),
                        )
                    )
        return out, {
            "proxy": ctx_proxy,
            "study_id": study_id,
            "context_key": ctx,
            "trials": len(out),
            "arms": len(cells),
        }


def _chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


__all__ = ["BUILTIN_NAME", "ReferenceExists", "ReferenceStore", "arm_label", "default_context_key"]
