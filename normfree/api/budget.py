"""Per-token budgets of trial-seconds: what one token's studies may hold at once.

The per-study budget (``NORMFREE_MAX_STUDY_TRIAL_SECONDS``) bounds one request; this bounds a
token: the estimated trial-seconds of its studies that are not finished (pending, running or
paused; each study's estimate scaled by the share of its trials still to run) plus the new
study's must stay under ``NORMFREE_MAX_TOKEN_TRIAL_SECONDS``. Over it, creation answers 429
with ``Retry-After`` and the figures (in use, asked, limit), so ten big studies from one token
in a row are accepted until the budget is spent and the later ones refused.

Which studies are a token's: those it owns (``studies.owner_token_id``, issue 28 point 3),
read from storage at each creation, so the budget holds across restarts and server processes.
Each study's estimate is recomputed from its stored spec (pure; remembered per study id).
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

from normfree.api.errors import ApiError

ACTIVE = ("pending", "running", "paused")


class TokenBudget:
    """The check (see the module docstring)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._estimates: dict[int, float] = {}
        self._locks: dict[int | None, asyncio.Lock] = {}
        self._mutex = threading.Lock()

    def lock(self, owner: int | None) -> asyncio.Lock:
        """Held around check-then-create, so two parallel creations cannot both fit."""
        return self._locks.setdefault(owner, asyncio.Lock())

    def _estimate(self, state: Any, row: dict[str, Any]) -> float:
        with self._mutex:
            hit = self._estimates.get(row["id"])
        if hit is None:
            from normfree.specs import StudySpec
            from normfree.workers.cost import estimate

            try:
                hit = estimate(StudySpec.model_validate(row["spec"]), state.settings).trial_seconds
            except Exception:  # a spec this code cannot read any more costs nothing here
                hit = 0.0
            with self._mutex:
                self._estimates[row["id"]] = hit
        return hit

    def in_use(self, state: Any, owner: int | None) -> float:
        """Trial-seconds the owner's unfinished studies may still spend (blocking: reads)."""
        from normfree.api.services.studies import _progress

        if owner is None:
            return 0.0
        used = 0.0
        for status in ACTIVE:
            for row in state.repo.list_studies(status=status):
                if row.get("owner_token_id") != owner:
                    continue
                progress = _progress(state.repo, row["id"])
                left = 1.0 - progress.fraction if progress.total else 1.0
                used += self._estimate(state, row) * left
        return used

    def check(self, state: Any, owner: int | None, seconds: float) -> None:
        """429 when ``seconds`` more would take the owner over its limit (blocking: reads)."""
        used = self.in_use(state, owner)
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


__all__ = ["ACTIVE", "TokenBudget"]
