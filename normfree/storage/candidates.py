"""Candidates: the catalog of stored functions (user submissions, discovered candidates).

Part of :class:`normfree.storage.Repository` (see ``storage/repository.py`` for the guarantees).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from normfree.storage import aggregates
from normfree.storage import leaderboard as boards
from normfree.storage._common import (
    RepositoryBase,
    _candidate_dict,
    _field,
    _jsonable,
    where_equal,
)
from normfree.storage.models import (
    CandidateRow,
    TrialRow,
    utcnow,
)
from normfree.storage.records import CandidateRecord


@functools.cache
def _by_name() -> Any:
    t = CandidateRow.__table__
    return select(t).where(t.c.name == bindparam("name"))


@functools.cache
def _by_canonical_key() -> Any:
    t = CandidateRow.__table__
    return select(t).where(t.c.canonical_key == bindparam("key"))


def canonical_key(canonical: str) -> str:
    """The unique key of a canonical form (``candidates.canonical_key``): its SHA-256, since
    canonical forms can be longer than an index entry may be."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CandidateConflict(ValueError):
    """A claim lost: ``field`` is ``"name"`` (the name is stored, ``existing`` is that row) or
    ``"canonical"`` (the function is stored under another name, ``existing``)."""

    def __init__(self, field: str, existing: dict[str, Any]) -> None:
        self.field, self.existing = field, existing
        super().__init__(f"{field} already claimed by {existing.get('name')!r}")


class CandidateInUse(ValueError):
    """A candidate that trials of stored studies ran: deleting it would leave their arms on
    the leaderboards without its formula, group and properties. ``study_ids`` names them."""

    def __init__(self, name: str, study_ids: list[int]) -> None:
        self.name, self.study_ids = name, study_ids
        shown = ", ".join(str(i) for i in study_ids[:10])
        more = f" and {len(study_ids) - 10} more" if len(study_ids) > 10 else ""
        super().__init__(
            f"candidate {name!r} is used by studies {shown}{more}: delete those studies first, "
            "or archive the candidate instead (it then leaves the candidate list, and the "
            "studies keep their results)"
        )


class CandidateRepository(RepositoryBase):
    """Candidates: the catalog of stored functions (user submissions, discovered candidates)."""

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
        # The function's key, so that the unique constraint that decides submissions
        # (claim_candidate) also sees catalog and generated rows. A key another name holds
        # already is left NULL here: that row stands for the function.
        key = canonical_key(values["canonical"]) if values["canonical"] else None
        try:
            return self._upsert(values, key, keep_submitter=values["submitter"] is None)
        except IntegrityError:
            if key is None:
                raise
        return self._upsert(values, None, keep_submitter=values["submitter"] is None)

    def _upsert(self, values: dict[str, Any], key: str | None, *, keep_submitter: bool) -> int:
        stmt = self._insert(CandidateRow).values(**values, canonical_key=key)
        kept = ("name", "created_at")
        updates = {k: stmt.excluded[k] for k in (*values, "canonical_key") if k not in kept}
        if keep_submitter:
            updates.pop("submitter")
        stmt = stmt.on_conflict_do_update(index_elements=["name"], set_=updates).returning(
            CandidateRow.id
        )
        with self.db.session() as s:
            cid = int(s.execute(stmt).scalar_one())
            aggregates.bump(s, "candidates")  # leaderboards and lists show group and properties
            return cid

    def claim_candidate(
        self,
        candidate: Any,
        submitter: str | None = None,
        *,
        prescreen: Mapping[str, Any] | None = None,
        owner_token_id: int | None = None,
        prescreen_claimant: str | None = None,
    ) -> int:
        """Store a new candidate with one INSERT under the unique name and canonical key;
        returns its id, or raises :class:`CandidateConflict` naming the row that holds either.

        Why not read then upsert: two racers both read "absent" and both upserted, each told it
        created the name. The database's unique constraints decide instead, on every backend.
        ``prescreen`` (e.g. ``{"status": "pending"}``) is written in the same insert, so a
        prescreen interrupted by a crash is visible at the next start and re-queued.
        ``owner_token_id``: the submitting token (only it or an admin may archive or delete it).
        ``prescreen_claimant``: the process that runs that prescreen (see :meth:`claim_prescreen`),
        so another server process starting meanwhile does not run it too.
        """
        name = _field(candidate, "name")
        canonical = _field(candidate, "canonical")
        if not name or not canonical:
            raise ValueError("a claimed candidate needs a name and a canonical form")
        values = {
            "name": str(name),
            "formula": _field(candidate, "formula"),
            "canonical": str(canonical),
            "canonical_key": canonical_key(str(canonical)),
            "fingerprint": _field(candidate, "fingerprint"),
            "properties": _jsonable(_field(candidate, "properties")) or {},
            "lineage": _jsonable(_field(candidate, "lineage")) or {},
            "group": _field(candidate, "group"),
            "citation": _field(candidate, "citation"),
            "submitter": submitter,
            "created_at": utcnow(),
            "prescreen": _jsonable(dict(prescreen)) if prescreen is not None else None,
            "owner_token_id": owner_token_id,
            "prescreen_claimed_by": prescreen_claimant,
            "prescreen_claimed_at": utcnow() if prescreen_claimant else None,
        }
        for key in ("formula", "fingerprint", "group", "citation"):
            if values[key] is not None:
                values[key] = str(values[key])
        try:
            with self.db.session() as s:
                cid = int(
                    s.execute(
                        insert(CandidateRow).values(**values).returning(CandidateRow.id)
                    ).scalar_one()
                )
                aggregates.bump(s, "candidates")
                return cid
        except IntegrityError:
            pass  # the winner has committed (a unique check waits for it): read which one won
        held = self.get_candidate(values["name"])
        if held is not None:
            raise CandidateConflict("name", held)
        with self.db.read_one() as conn:
            row = conn.execute(_by_canonical_key(), {"key": values["canonical_key"]}).first()
        if row is not None:
            raise CandidateConflict("canonical", _candidate_dict(row))
        raise RuntimeError(f"storing candidate {values['name']!r} failed and no row holds it")

    def claim_prescreen(
        self,
        name: str,
        claimant: str,
        lease: timedelta,
        gone: Callable[[str], bool] = lambda _holder: False,
    ) -> bool:
        """Claim the pending prescreen of candidate ``name`` for process ``claimant``; True when
        this call won it.

        Of the processes of ``serve --workers N`` that all re-queue the interrupted prescreens
        at start, one conditional UPDATE lets exactly one set the claim. A claim may be taken
        from its holder when it is older than ``lease``, or when ``gone(holder)`` says the
        holder died (a server killed and started again re-queues at once, not a lease later):
        the UPDATE then names that holder, so of several takers one wins."""
        t = CandidateRow
        with self.db.read_one() as conn:
            holder = conn.execute(
                select(t.prescreen_claimed_by).where(t.name == name)
            ).scalar_one_or_none()
        now = utcnow()
        free = or_(t.prescreen_claimed_by.is_(None), t.prescreen_claimed_at < now - lease)
        if holder is not None and gone(holder):
            free = or_(free, t.prescreen_claimed_by == holder)
        with self.db.session() as s:
            res = s.execute(
                update(t)
                .where(t.name == name, t.prescreen.is_not(None), free)
                .values(prescreen_claimed_by=claimant, prescreen_claimed_at=now)
            )
            return res.rowcount == 1

    def set_candidate_prescreen(self, name: str, prescreen: Mapping[str, Any]) -> bool:
        """Record a stored candidate's prescreen (its status and result); False if none is named
        ``name``. Written after the submission's answer, by the process that ran it; a finished
        one ends its claim (:meth:`claim_prescreen`)."""
        values: dict[str, Any] = {"prescreen": _jsonable(dict(prescreen))}
        if prescreen.get("status") != "pending":
            values.update(prescreen_claimed_by=None, prescreen_claimed_at=None)
        with self.db.session() as s:
            res = s.execute(update(CandidateRow).where(CandidateRow.name == name).values(**values))
            if res.rowcount == 1:  # the candidate's own read (its page and JSON) shows it
                aggregates.bump(s, f"candidate:{name}")
            return res.rowcount == 1

    def get_candidate(self, name: str) -> CandidateRecord | None:
        """The candidate named ``name`` as a dict (keys as the table's columns), or None.

        A Core read of a prebuilt statement: every submission asks it, and an ORM session
        with a statement built per call cost several times the query."""
        with self.db.read_one() as conn:  # one statement: one round trip
            row = conn.execute(_by_name(), {"name": name}).first()
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
        archived: bool = True,
    ) -> list[dict[str, Any]]:
        """Candidates by name, filtered; ``properties`` matches property values exactly;
        archived ones unless ``archived`` is False."""
        q = where_equal(
            select(CandidateRow).order_by(CandidateRow.name),
            CandidateRow,
            group=group,
            submitter=submitter,
            fingerprint=fingerprint,
            canonical=canonical,
        )
        if name_contains:
            q = q.where(CandidateRow.name.contains(name_contains, autoescape=True))
        if not archived:
            q = q.where(CandidateRow.archived_at.is_(None))
        with self.db.session(readonly=True) as s:
            rows = [_candidate_dict(r) for r in s.scalars(q)]
        if properties:
            rows = [r for r in rows if boards.props_match(r["properties"], properties)]
        return rows[offset : None if limit is None else offset + limit]

    # -- housekeeping ------------------------------------------------------------------------

    def candidate_usage(self, name: str) -> list[int]:
        """The studies whose trials ran candidate ``name`` (alone or under a transform, e.g.
        ``shift_h(name, 1)``), ascending."""
        with self.db.session(readonly=True) as s:
            return _usage(s, name)

    def archive_candidate(self, name: str, archived: bool = True) -> dict[str, Any]:
        """Hide a stored candidate from the candidate list (``archived=False``: show it again);
        the row. Studies and leaderboards that ran it are unchanged. KeyError when none."""
        with self.db.session() as s:
            row = s.scalar(select(CandidateRow).where(CandidateRow.name == name))
            if row is None:
                raise KeyError(f"no stored candidate {name!r}")
            if (row.archived_at is not None) != archived:
                row.archived_at = utcnow() if archived else None
                aggregates.bump(s, "candidates")
            s.flush()
            return _candidate_dict(row)

    def delete_candidate(self, name: str) -> dict[str, Any]:
        """Delete a stored candidate no study ran; the deleted row. KeyError when none,
        :class:`CandidateInUse` when trials of a study ran it (checked in the transaction that
        deletes, so a study stored meanwhile is seen)."""
        with self.db.session() as s:
            row = s.scalar(select(CandidateRow).where(CandidateRow.name == name))
            if row is None:
                raise KeyError(f"no stored candidate {name!r}")
            out = _candidate_dict(row)
            used = _usage(s, name)
            if used:
                raise CandidateInUse(name, used)
            s.execute(delete(CandidateRow).where(CandidateRow.id == row.id))
            aggregates.bump(s, "candidates")
            return out


def _usage(s: Any, name: str) -> list[int]:
    like = f"%({name},%"
    q = (
        select(TrialRow.study_id, TrialRow.candidate)
        .where((TrialRow.candidate == name) | TrialRow.candidate.like(like))
        .distinct()
    )
    return sorted({int(sid) for sid, c in s.execute(q) if _runs(str(c), name)})


def _runs(candidate: str, name: str) -> bool:
    """Whether a trial's candidate text runs ``name``: the name itself, or a transform call
    whose function argument is it (``shift_h(name, 1)``; nested calls included)."""
    if candidate == name:
        return True
    return f"({name}," in candidate.replace(" ", "")
