"""Why an arm failed: one reason per failed trial, and the most common one per arm.

Every view that lists arms (the leaderboard in the API, the pages and the CLI; a study's cells)
states why an arm's seeds failed with the text this module picks, so the reason is read the same
way everywhere. A trial's reason is the first line of its stored error (what the public may read,
``workers.errors.failure_reason``) with the parts that differ between attempts of one fault
removed (``attempt 2:``, ``[ref 3f2a...]``), so that a fault met on three seeds counts three
times; a divergence is a result, and reads as ``diverged`` with its recorded failure.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from normfree.storage.models import TrialRow

# Trial statuses that are failures to train (a pruned trial stopped early by design).
FAILURE_STATUSES = ("FAILED", "DIVERGED")

_ATTEMPT = re.compile(r"^attempt \d+:\s*")
_REF = re.compile(r"\s*\[ref [0-9a-f]+\]")
_MAX_REASON = 300


def trial_reason(status: str, error: str | None, failure: str | None = None) -> str | None:
    """One failed trial's reason (None for a trial that did not fail)."""
    if status == "DIVERGED":
        return f"diverged: {failure}"[:_MAX_REASON] if failure else "diverged"
    if status != "FAILED":
        return None
    text = (error or "").strip()
    if not text:
        return "failed (no reason recorded)"
    line = _REF.sub("", _ATTEMPT.sub("", text.splitlines()[0]))
    return line.strip()[:_MAX_REASON] or "failed (no reason recorded)"


def most_common(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"reason", "count", "failed"}`` over trial rows (status, error, failure): the most
    common reason, how many trials gave it, and how many failed in all; None if none failed."""
    reasons = Counter(
        r
        for t in rows
        if (r := trial_reason(t["status"], t.get("error"), t.get("failure"))) is not None
    )
    if not reasons:
        return None
    # ties: the alphabetically first reason, so two reads of one arm agree
    reason, count = min(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"reason": reason, "count": count, "failed": sum(reasons.values())}


def arm_failures(
    session: Any, proxy: str, arm_keys: Sequence[str], study_id: int | None = None
) -> dict[str, dict[str, Any]]:
    """The most common failure per arm of ``proxy`` among ``arm_keys`` (of one study)."""
    cols = (TrialRow.arm_key, TrialRow.status, TrialRow.error, TrialRow.failure)
    q = sa.select(*cols).where(TrialRow.proxy == proxy, TrialRow.status.in_(FAILURE_STATUSES))
    if study_id is not None:
        q = q.where(TrialRow.study_id == study_id)
    by_arm: dict[str, list[dict[str, Any]]] = defaultdict(list)
    keys = sorted(set(arm_keys))
    for i in range(0, len(keys), 500):
        for arm, status, error, failure in session.execute(
            q.where(TrialRow.arm_key.in_(keys[i : i + 500]))
        ):
            by_arm[arm].append({"status": status, "error": error, "failure": failure})
    return {arm: found for arm, rows in by_arm.items() if (found := most_common(rows))}


def unranked_reason(row: Mapping[str, Any]) -> str:
    """Why an arm with no completed seed is not ranked, in one line."""
    failure = row.get("failure")
    if failure:
        return f"{failure['reason']} ({failure['count']} of {row.get('n_trials', 0)} trials)"
    if row.get("n_pruned"):
        return f"pruned on every seed ({row['n_pruned']} trials)"
    return "no seed completed"


__all__ = ["FAILURE_STATUSES", "arm_failures", "most_common", "trial_reason", "unranked_reason"]
