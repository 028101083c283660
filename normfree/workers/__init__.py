"""normfree.workers: proxies, the trainer, and the engine that runs studies.

- ``proxies`` (``PROXIES``), ``data``, ``trainer`` (``train_trial``: pure), ``diagnostics``,
  ``prescreen``: what one trial is.
- ``kinds``: the study kinds (one module each: what a kind plans, accepts and reports) and
  ``scheduling``, the pieces they share (a study's trial configs, paired seeds, grid planning).
- ``execution``: one leased trial runs as a Ray task with heartbeats (``RayExecutor``).
- ``driver``: the resumable study loop (``create_study``, ``StudyDriver``).

The engine's names are re-exported lazily: importing ``normfree.workers`` must not import Ray or
Optuna (the CLI and the trainer's tests do not need them).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "create_study": "normfree.workers.driver",
    "StudyDriver": "normfree.workers.driver",
    "DriverSummary": "normfree.workers.driver",
    "RayExecutor": "normfree.workers.execution",
    "TrialJob": "normfree.workers.execution",
    "TrialStore": "normfree.workers.execution",
    "run_trial_job": "normfree.workers.execution",
    "plan_grid": "normfree.workers.scheduling",
    "PlannedTrial": "normfree.workers.scheduling",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'normfree.workers' has no attribute {name!r}")
