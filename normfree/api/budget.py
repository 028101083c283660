"""Per-token budgets of trial-seconds: what one token's studies may hold at once.

The per-study budget (``NORMFREE_MAX_STUDY_TRIAL_SECONDS``) bounds one request; this bounds a
token: the estimated trial-seconds of its studies that are not finished (pending, running or
paused; each study's estimate scaled by the share of its trials still to run) plus the new
study's must stay under ``NORMFREE_MAX_TOKEN_TRIAL_SECONDS``. Over it, creation answers 429
with ``Retry-After`` and the figures (in use, asked, limit), so ten big studies from one token
in a row are accepted until the budget is spent and the later ones refused.

Which studies are a token's: this process's ledger of the studies each token created through
the API (token name -> study id -> estimate). A study created before a restart or by another
server process is not charged (the ledger is per process); ownership stored on the study row
(issue 28 point 3) is where it should come from once it exists.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

from normfree.api.errors import ApiError

ACTIVE = ("pending", "running", "paused")


class TokenBudget:
    """The ledger and its check (see the module docstring)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._studies: dict[str, dict[int, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._mutex = threading.Lock()

    def lock(self, token: str) -> asyncio.Lock:
        """Held around check-then-create, so two parallel creations cannot both fit."""
        return self._locks.setdefault(token, asyncio.Lock())

    def in_use(self, state: Any, token: str) -> float:
        """Trial-seconds the token's unfinished studies may still spend (blocking: reads)."""
        from normfree.api.services.studies import _progress

        with self._mutex:
            studies = dict(self._studies.get(token, {}))
        used = 0.0
        for study_id, seconds in studies.items():
            row = state.repo.get_study(study_id)
            if row is None or row["status"] not in ACTIVE:
                with self._mutex:
                    self._studies.get(token, {}).pop(study_id, None)
                continue
            progress = _progress(state.repo, study_id)
            left = 1.0 - progress.fraction if progress.total else 1.0
            used += seconds * left
        return used

    def check(self, state: Any, token: str, seconds: float) -> None:
        """429 when ``seconds`` more would take the token over its limit (blocking: reads)."""
        used = self.in_use(state, token)
        if used + seconds <= self.limit:
            return
        excess = used + seconds - self.limit
        raise ApiError(
            429,
            "budget_exceeded",
            f"this token's unfinished studies hold ~{used:,.0f} trial-seconds; this study asks "
            f"~{seconds:,.0f} more, over the token's budget of {self.limit:,.0f} "
            "(NORMFREE_MAX_TOKEN_TRIAL_SECONDS); wait for its studies to finish, cancel one, "
            "or ask for less",
            {
                "in_use_seconds": round(used, 1),
                "asked_seconds": round(seconds, 1),
                "limit_seconds": self.limit,
            },
            headers={"Retry-After": str(min(86_400, max(1, math.ceil(excess))))},
        )

    def charge(self, token: str, study_id: int, seconds: float) -> None:
        with self._mutex:
            self._studies.setdefault(token, {})[study_id] = seconds


__all__ = ["ACTIVE", "TokenBudget"]
