"""normfree.storage: SQL persistence of candidates, studies, trials and their results.

``Database(url)`` owns the engine and migrations; ``Repository(db)`` is the one API the engine
(workers) and the REST layer use; ``stats`` holds the leaderboard statistics. See
``repository.py`` for the guarantees (idempotent planning, exclusive leases, results written once).
"""

from normfree.specs import STUDY_STATUSES, TERMINAL_TRIAL_STATUSES, TRIAL_STATUSES
from normfree.storage import stats
from normfree.storage.db import (
    Database,
    drop_database,
    ensure_database,
    normalize_url,
    optuna_storage_url,
)
from normfree.storage.handle import (
    Storage,
    open,
)
from normfree.storage.repository import LeasedTrial, Repository, arm_key, context_key

__all__ = [
    "STUDY_STATUSES",
    "TERMINAL_TRIAL_STATUSES",
    "TRIAL_STATUSES",
    "Database",
    "LeasedTrial",
    "Repository",
    "Storage",
    "arm_key",
    "context_key",
    "drop_database",
    "ensure_database",
    "normalize_url",
    "open",
    "optuna_storage_url",
    "stats",
]
