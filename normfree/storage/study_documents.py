"""Per-study documents computed when a study's trials are written, read back by the API.

Today one: a search or generate study's property importance (``workers.importance``). Building
it needs scipy, sympy and every function resolved: seconds on a small machine, far too slow
for the first request of a page after a start. So the driver computes it when a trial of the
study finishes and keeps it with the study, where a later read only looks it up.

Where it is kept: as a user attribute of the study's Optuna study (:data:`IMPORTANCE_ATTR`).
Search and generate studies, the only ones with an importance, always have one; both the
driver (which writes it through Optuna) and the server (which knows the Optuna storage URL)
reach it without a schema change of ours, and it survives restarts. The server reads it with
one SQL query on Optuna's tables (``studies``, ``study_user_attributes``) instead of importing
Optuna (a second of start-up on the first read).

Staleness: a document carries the finished-trial counts it was computed from
(:func:`outcome_counts`). A reader compares them with the study's counts now; a mismatch means
trials finished since, and the reader must say so (``stale``) rather than serve it as current.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from normfree.specs import RUN_OUTCOME_STATUSES

__all__ = [
    "IMPORTANCE_ATTR",
    "OptunaDocuments",
    "importance_document",
    "outcome_counts",
]

log = logging.getLogger(__name__)

IMPORTANCE_ATTR = "normfree:importance"


def outcome_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """The counts a study's importance depends on: its trials per final run outcome (a trial
    waiting or running adds nothing to it)."""
    return {s: int(counts.get(s, 0)) for s in RUN_OUTCOME_STATUSES}


def importance_document(importance: Mapping[str, Any], counts: Mapping[str, int]) -> dict[str, Any]:
    """What is stored: the importance and the outcome counts it was computed from."""
    return {"counts": outcome_counts(counts), "importance": dict(importance)}


class OptunaDocuments:
    """Reads the documents of :mod:`this module <normfree.storage.study_documents>` from an
    Optuna RDB storage with plain SQL (no Optuna import, one small engine per server)."""

    def __init__(self, optuna_url: str) -> None:
        self.url = optuna_url
        self._engine: sa.Engine | None = None

    def _connect(self) -> sa.Engine | None:
        if self._engine is None:
            url = make_url(self.url)
            if url.get_backend_name() == "sqlite":
                db = url.database or ""
                # Never create an empty Optuna file by looking: no file yet means no document.
                if not db or db == ":memory:" or db.startswith("file:") or not Path(db).exists():
                    return None
            self._engine = sa.create_engine(url, pool_pre_ping=True)
        return self._engine

    def importance(self, study_name: str | None) -> dict[str, Any] | None:
        """The stored importance document of one Optuna study, or None (none stored, no Optuna
        storage yet, or it cannot be read: the caller then computes or waits for a refresh)."""
        if not study_name:
            return None
        try:
            engine = self._connect()
            if engine is None:
                return None
            q = sa.text(
                "SELECT a.value_json FROM study_user_attributes a "
                "JOIN studies s ON s.study_id = a.study_id "
                "WHERE s.study_name = :name AND a.key = :key"
            )
            with engine.connect() as conn:
                raw = conn.execute(q, {"name": study_name, "key": IMPORTANCE_ATTR}).scalar()
        except sa.exc.SQLAlchemyError:
            log.info("no stored importance for %s", study_name, exc_info=True)
            return None
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except (TypeError, ValueError):
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("counts"), dict):
            return None
        return doc

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
