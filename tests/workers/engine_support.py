"""Shared helpers of the engine's tests (scheduling, execution, driver, faults, end-to-end).

One embedded Ray per test module (2 CPUs: the two one-thread trials side by side this machine
runs), ended with ``ray.shutdown()`` (never ``ray stop``: that kills every Ray on the machine).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from normfree.settings import Settings

if TYPE_CHECKING:
    from normfree.workers.execution import TrialStore


def engine_settings(database_url: str, **kw: Any) -> Settings:
    """Settings for one test: its own database, short leases, one thread per trial."""
    base: dict[str, Any] = {
        "database_url": database_url,
        "lease_seconds": 20.0,
        "max_attempts": 3,
        "trial_threads": 1,
        "trial_cpus": 1.0,
    }
    base.update(kw)
    return Settings(**base)


def driver_process(study_id: int, env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """``normfree study run ID --parallel 2`` as a process of its own, to be killed mid-study.

    In a new session, so that a test can signal the driver without its own process group.
    """
    code = "from normfree.cli import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, "study", "run", str(study_id), "--json", "--parallel", "2"],
        env=env,
        start_new_session=True,
        **popen,
    )


def wait_for(
    pred: Callable[[], Any], timeout: float = 120.0, what: str = "the condition", every: float = 0.1
) -> Any:
    """Poll ``pred`` until it returns something truthy (returned), for at most ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def mid_trial(store: TrialStore, study_id: int) -> bool:
    """A RUNNING trial of the study has recorded an epoch: mid-study and mid-trial."""
    rows = store.repo.list_trials(study_id, status="RUNNING")
    return any(store.repo.get_trial(r["id"])["curves"] for r in rows)


def ray_cluster() -> Iterator[None]:
    """Start an embedded Ray for a test module and shut it down after."""
    import ray

    from normfree.workers.execution import RayExecutor

    if ray.is_initialized():  # another module's cluster: reuse it, do not own it
        yield
        return
    ex = RayExecutor(Settings(), num_cpus=2).start()
    try:
        yield
    finally:
        ex.shutdown()


def drop_optuna_database(database_url: str) -> None:
    """The PostgreSQL fixtures drop our database; Optuna's sibling is ours to drop."""
    from types import SimpleNamespace

    from normfree.storage import drop_database, optuna_storage_url

    url = optuna_storage_url(SimpleNamespace(database_url=database_url, optuna_storage_url=None))
    if url.startswith("postgresql"):
        drop_database(url)
