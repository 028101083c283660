"""What the layers above storage may ask of it, as typed protocols, one per aggregate.

The API and the workers type their storage handle with these instead of ``Any``: a type checker
then sees every call and every key of what comes back (``storage.records``), and another
backend (or a read-only replica) is anything that answers them.
:class:`normfree.storage.Repository` implements all of them (:class:`RepositoryLike`);
``tests/storage/test_repository.py`` checks that it does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from normfree.specs import EpochRecord, StudySpec, TrialResult
from normfree.storage._common import LeasedTrial, TrialItem
from normfree.storage.records import (
    CandidateRecord,
    LeaderboardRow,
    StudyProgress,
    StudyRecord,
    TokenRecord,
    TrialRecord,
)

if TYPE_CHECKING:
    from normfree.storage.tokens import Principal


@runtime_checkable
class CandidateStore(Protocol):
    """Stored candidates: upsert, read, list, a prescreen result."""

    def upsert_candidate(self, candidate: Any, submitter: str | None = None) -> int: ...

    def claim_candidate(
        self,
        candidate: Any,
        submitter: str | None = None,
        *,
        prescreen: Mapping[str, Any] | None = None,
        owner_token_id: int | None = None,
    ) -> int: ...

    def set_candidate_prescreen(self, name: str, prescreen: Mapping[str, Any]) -> bool: ...

    def get_candidate(self, name: str) -> CandidateRecord | None: ...

    def list_candidates(self, **filters: Any) -> list[CandidateRecord]:
        """Filters: group, submitter, fingerprint, canonical, properties, name_contains, limit,
        offset, archived (``storage.candidates.CandidateRepository.list_candidates``)."""

    def candidate_usage(self, name: str) -> list[int]: ...

    def archive_candidate(self, name: str, archived: bool = True) -> dict[str, Any]: ...

    def delete_candidate(self, name: str) -> dict[str, Any]: ...


@runtime_checkable
class StudyStore(Protocol):
    """Studies: create, read, list, status, progress; archives, tags, notes, deletion."""

    def create_study(
        self,
        spec: StudySpec,
        *,
        optuna_study_name: str | None = None,
        status: str = "pending",
        owner_token_id: int | None = None,
    ) -> int: ...

    def finish_creation(self, study_id: int) -> bool: ...

    def delete_study(self, study_id: int) -> None: ...

    def delete_finished_study(self, study_id: int) -> str | None: ...

    def get_study(self, study_id: int) -> StudyRecord | None: ...

    def get_study_spec(self, study_id: int) -> StudySpec | None: ...

    def list_studies(
        self, *, status: str | None = None, archived: bool | None = None, tag: str | None = None
    ) -> list[StudyRecord]: ...

    def study_removal(self, study_id: int, arm_key: str | None = None) -> dict[str, Any]: ...

    def delete_arm(self, study_id: int, arm_key: str) -> dict[str, Any]: ...

    def archive_study(self, study_id: int, archived: bool = True) -> dict[str, Any]: ...

    def archive_arm(self, study_id: int, arm_key: str, archived: bool = True) -> int: ...

    def archived_arms(self, study_id: int) -> list[str]: ...

    def tag_study(
        self, study_id: int, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> list[str]: ...

    def note_study(self, study_id: int, note: str | None) -> str | None: ...

    def set_study_status(self, study_id: int, status: str) -> None: ...

    def study_progress(self, study_id: int) -> StudyProgress: ...


@runtime_checkable
class TrialLedger(Protocol):
    """Trials: idempotent planning, exclusive leases, results written once, reads."""

    def add_trials(self, study_id: int, items: Iterable[TrialItem]) -> list[int]: ...

    def reuse_finished(self, study_id: int, code_version: str) -> list[int]: ...

    def set_optuna_number(self, trial_id: int, number: int) -> None: ...

    def lease_next(
        self, study_id: int | None, owner: str, lease_seconds: float
    ) -> LeasedTrial | None: ...

    def renew_lease(
        self, trial_id: int, owner: str, attempt: int, lease_seconds: float
    ) -> bool: ...

    def requeue_expired(
        self, now: datetime | None = None, max_attempts: int | None = None
    ) -> list[int]: ...

    def record_epoch(
        self,
        trial_id: int,
        owner: str,
        attempt: int,
        record: EpochRecord,
        *,
        lease_seconds: float | None = None,
    ) -> bool: ...

    def finish_trial(
        self, trial_id: int, owner: str, attempt: int, result: TrialResult
    ) -> bool: ...

    def fail_trial(
        self, trial_id: int, owner: str, attempt: int, reason: str, retry: bool = False
    ) -> bool: ...

    def release_lease(
        self, trial_id: int, owner: str, attempt: int, reason: str | None = None
    ) -> bool: ...

    def cancel_running(
        self, trial_id: int, owner: str, attempt: int, reason: str = "study cancelled"
    ) -> bool: ...

    def cancel_waiting(self, study_id: int) -> int: ...

    def get_trial(self, trial_id: int) -> TrialRecord | None: ...

    def get_trial_by_key(self, study_id: int, trial_key: str) -> TrialRecord | None: ...

    def list_trials(self, study_id: int | None = None, **filters: Any) -> list[TrialRecord]:
        """Filters: status, proxy, candidate, limit, offset (``TrialRepository.list_trials``)."""

    def list_proxies(self) -> list[str]: ...


@runtime_checkable
class TokenStore(Protocol):
    """API write tokens (stored hashed)."""

    def create_token(
        self, name: str, scopes: Sequence[str] = ("write",), *, expires_at: datetime | None = None
    ) -> str: ...

    def verify_token(self, plaintext: str, scope: str | None = None) -> bool: ...

    def token_name(self, plaintext: str, scope: str | None = None) -> str | None: ...

    def token_principal(self, plaintext: str) -> Principal | None: ...

    def token_expiry(self, plaintext: str) -> datetime | None: ...

    def revoke_token(self, name: str) -> bool: ...

    def list_tokens(self) -> list[TokenRecord]: ...


@runtime_checkable
class RepositoryLike(CandidateStore, StudyStore, TrialLedger, TokenStore, Protocol):
    """Everything the engine and the API use: what ``storage.open(settings).repo`` is."""

    def leaderboard(self, proxy: str, **filters: Any) -> list[LeaderboardRow]: ...
