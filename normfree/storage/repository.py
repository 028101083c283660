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

from typing import Any

from normfree.storage import leaderboard as boards
from normfree.storage._common import (
    BASELINE_GROUP,
    REFERENCE_NORM,
    TRIAL_RESULT_STATUS,
    LeasedTrial,
    TrialItem,
    arm_key,
    context_key,
)
from normfree.storage.candidates import CandidateRepository
from normfree.storage.records import LeaderboardRow
from normfree.storage.studies import StudyRepository
from normfree.storage.tokens import TokenRepository
from normfree.storage.trials import TrialRepository


class Repository(CandidateRepository, StudyRepository, TrialRepository, TokenRepository):
    """All storage operations of normfree over one :class:`Database`: one class per aggregate
    (``storage/candidates.py``, ``studies.py``, ``trials.py``, ``tokens.py``), joined here.

    ``max_attempts`` bounds retries (lease expiry and ``fail_trial(retry=True)``); it defaults to
    ``Settings.max_attempts``.
    """

    def leaderboard(self, proxy: str, **filters: Any) -> list[LeaderboardRow]:
        """Ranked arms of ``proxy``: one row per arm (config without seed), over its seeds.

        ``filters`` are :func:`storage.leaderboard.leaderboard`'s: ``group``, ``properties``,
        ``study_id``, ``metric``, ``direction``, ``alpha``, ``from_scratch``.

        Values are the trials' objective (or ``metric`` from their final metrics) of COMPLETE
        trials; one value per seed (the latest trial when several studies ran the same seed).
        Ranking is by the lower 95% t bound (upper when minimising), see ``storage.stats``.
        ``group`` / ``properties`` filter on the candidate's stored group and properties
        (baselines without a candidate row are in group ``"baseline"``).

        Row keys: ``rank``, ``arm_key``, ``candidate``, ``norm``, ``axis_values``, ``overrides``,
        ``group``, ``properties``, ``objective``, ``direction``, ``n`` (seeds with a value),
        ``n_trials`` (finished trials), ``n_diverged``, ``n_failed``, ``n_pruned``, ``mean``,
        ``std``, ``ci_half_width``, ``ci_low``, ``ci_high``, ``bound``, ``seeds``, ``seed_values``,
        ``p_vs_best`` (Welch), ``indistinguishable_from_best``, ``vs_layernorm`` (None or
        ``{n_pairs, seeds, mean_diff, std, ci_half_width, ci_low, ci_high}`` of candidate minus
        LayerNorm on shared seeds), ``study_ids``, ``ranked``, ``failure`` (None or the arm's
        most common failure ``{reason, count, failed}``, ``storage.failures``) and
        ``unranked_reason``. An arm with no completed seed is never ranked against the others:
        it comes after them with ``rank`` None, ``ranked`` False and its reason.

        Read from the per-arm summaries (``storage.aggregates``: one row per arm, whatever the
        number of trials); ``study_id`` and ``metric`` boards group trials instead, and
        ``from_scratch=True`` recomputes everything from the trials (the reference the contract
        tests compare with). Both give identical rows.
        """
        return boards.leaderboard(self.db, proxy, **filters)


__all__ = [
    "BASELINE_GROUP",
    "REFERENCE_NORM",
    "TRIAL_RESULT_STATUS",
    "LeasedTrial",
    "Repository",
    "TrialItem",
    "arm_key",
    "context_key",
]
