"""Housekeeping: archive or delete studies, arms (by study) and stored candidates; tags and
notes on studies. Shared by the REST routes and the CLI.

Every change here needs the token that created the row or an admin token (``api.deps``:
403 otherwise). A delete lists what it removes before removing it (``dry_run`` answers only
the list), and removes everything that hangs off it in one transaction: trials, their curves
and diagnostics (foreign keys cascade), the leaderboard arm summaries (folded again), the Optuna
study, and the cached reads (the read versions the rebuild bumps, and the study's update time
the study's own reads are keyed on).

A stored candidate that trials of a study ran is not deleted (409 naming the studies): its
formula, group and properties are what their arms on the leaderboards show. Archive it instead
(it leaves the candidate list; the studies and boards are unchanged), or delete those studies
first.
"""

from __future__ import annotations

from typing import Any, Literal

from normfree.api import schemas as S
from normfree.api.deps import require_owner
from normfree.api.errors import ApiError, not_found
from normfree.api.services.state import ServiceState
from normfree.storage.tokens import Principal


def _owned(
    row: dict[str, Any] | None, who: Principal | None, kind: str, key: object, what: str
) -> dict[str, Any]:
    """``row``, the ``kind`` stored under ``key``; 404 when none, 403 unless ``who`` owns it
    (None: the CLI, which holds the database itself and is not checked)."""
    if row is None:
        raise not_found(kind, key)
    if who is not None:
        require_owner(who, row.get("owner_token_id"), what)
    return row


def _owned_study(state: ServiceState, study_id: int, who: Principal | None) -> dict[str, Any]:
    return _owned(state.repo.get_study(study_id), who, "study", study_id, f"study {study_id}")


def _busy(exc: Exception) -> ApiError:
    return ApiError(409, "conflict", str(exc))


def _no_arm(study_id: int, arm_key: str) -> ApiError:
    return ApiError(
        404,
        "not_found",
        f"study {study_id} has no arm {arm_key[:80]}; its arms are the arm_keys of its cells "
        f"at /api/studies/{study_id}",
    )


def archive(
    state: ServiceState,
    kind: Literal["study", "candidate"],
    key: Any,
    who: Principal | None,
    *,
    archived: bool = True,
) -> S.ArchiveState:
    """Archive a finished study (409 while it runs) or hide a stored candidate from the
    candidate list; or restore either (``archived=False``). ``key``: the study's id or the
    candidate's name."""
    from normfree.storage.studies import StudyBusy

    study = kind == "study"
    (_owned_study if study else _owned_candidate)(state, key, who)
    try:
        row = (state.repo.archive_study if study else state.repo.archive_candidate)(key, archived)
    except KeyError:
        raise not_found(kind, key) from None
    except StudyBusy as exc:
        raise _busy(exc) from None
    named = {"study_id": key} if study else {"candidate": key}
    return S.ArchiveState(**named, archived=row["archived_at"] is not None)


def archive_arm(
    state: ServiceState, study_id: int, arm_key: str, who: Principal | None, *, archived: bool
) -> S.ArchiveState:
    """Take one arm of a study off the leaderboards, or put it back; 404 for an arm the study
    does not have."""
    _owned_study(state, study_id, who)
    try:
        n = state.repo.archive_arm(study_id, arm_key, archived)
    except KeyError:
        raise _no_arm(study_id, arm_key) from None
    return S.ArchiveState(study_id=study_id, arm_key=arm_key, archived=archived, trials=n)


def delete_arm(
    state: ServiceState, study_id: int, arm_key: str, who: Principal | None, *, dry_run: bool
) -> S.StudyDeleted:
    """Delete one arm of a finished study (its trials, curves, diagnostics; its proxy's
    summaries folded again), or with ``dry_run`` list what that removes."""
    from normfree.storage.studies import StudyBusy

    _owned_study(state, study_id, who)
    try:
        removes = S.Removal(**state.repo.study_removal(study_id, arm_key))
    except KeyError:
        raise _no_arm(study_id, arm_key) from None
    if dry_run:
        return S.StudyDeleted(id=study_id, deleted=False, dry_run=True, removes=removes)
    try:
        state.repo.delete_arm(study_id, arm_key)
    except KeyError:
        raise _no_arm(study_id, arm_key) from None
    except StudyBusy as exc:
        raise _busy(exc) from None
    return S.StudyDeleted(id=study_id, removes=removes)


def patch_study(
    state: ServiceState, study_id: int, data: S.StudyPatch, who: Principal | None
) -> S.StudyPublic:
    """Add or remove tags and set the note of a study (422 for a bad tag or note)."""
    from normfree.api.services.studies import _study_public

    _owned_study(state, study_id, who)
    try:
        if data.add_tags or data.remove_tags:
            state.repo.tag_study(study_id, add=data.add_tags, remove=data.remove_tags)
        if "note" in data.model_fields_set:
            state.repo.note_study(study_id, data.note)
    except KeyError:
        raise not_found("study", study_id) from None
    except ValueError as exc:
        raise ApiError(422, "invalid_study", str(exc)) from None
    row = state.repo.get_study(study_id)
    assert row is not None
    return _study_public(state, row)


def _owned_candidate(state: ServiceState, name: str, who: Principal | None) -> dict[str, Any]:
    """The stored candidate (a catalog entry is not stored: it cannot be deleted)."""
    return _owned(state.repo.get_candidate(name), who, "candidate", name, f"candidate {name!r}")


def delete_candidate(
    state: ServiceState, name: str, who: Principal | None, *, dry_run: bool
) -> S.StudyDeleted:
    """Delete a stored candidate no study ran (409 naming the studies that did), or with
    ``dry_run`` say whether it can be."""
    from normfree.storage.candidates import CandidateInUse

    row = _owned_candidate(state, name, who)
    used = state.repo.candidate_usage(name)
    removes = S.Removal(
        candidate=name,
        archived=row.get("archived_at") is not None,
        used_by_studies=used,
        blocked=str(CandidateInUse(name, used)) if used else None,
    )
    if dry_run:
        return S.StudyDeleted(deleted=False, dry_run=True, removes=removes)
    try:
        state.repo.delete_candidate(name)
    except KeyError:
        raise not_found("candidate", name) from None
    except CandidateInUse as exc:
        raise ApiError(409, "conflict", str(exc), {"used_by_studies": exc.study_ids}) from None
    return S.StudyDeleted(removes=removes)
