"""The API's handles (:class:`ServiceState`): settings, storage and the study runner.

Every service function takes one; the app builds it once at start (``ServiceState.open``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from normfree.api.cache import ResponseCache
from normfree.settings import Settings
from normfree.storage import Storage
from normfree.storage.protocols import RepositoryLike
from normfree.storage.tokens import Principal
from normfree.workers.lifecycle import StudyRunner

log = logging.getLogger(__name__)


def open_repository(settings: Settings, *, migrate: bool = True) -> RepositoryLike:
    """A storage ``Repository`` over ``settings.database_url`` (schema upgraded by default)."""
    from normfree import storage

    return storage.open(settings, migrate=migrate, optuna=False).repo


def recover_at_start(store: Storage) -> list[int]:
    """Remove studies whose creation a crash interrupted (status ``creating``, with their
    trials and Optuna study: ``workers.driver.recover_creations``); their ids. The engine is
    imported only when there is such a study."""
    if not store.repo.list_studies(status="creating"):
        return []
    from normfree.workers.driver import recover_creations

    return recover_creations(store)


# -------------------------------------------------------------------------------------- state


@dataclass
class ServiceState:
    """The API's handles: settings, storage (its repository), and the optional study runner."""

    settings: Settings
    store: Storage  # storage.open(settings): our database and, read lazily, Optuna's
    # In-process driver (embedded default) or, with ``NORMFREE_RAY_JOBS_ADDRESS``, a submitter of
    # Ray jobs (``normfree.workers.jobs.RayJobRunner``, same duck type) so that the API process
    # is never the driver of long studies on a cluster.
    runner: Any = None
    # Run the zero-cost prescreen on submissions (off only for fuzzing, where thousands of
    # random valid formulas would each cost seconds).
    prescreen: bool = True
    started_at: float = field(default_factory=time.time)
    # Encoded reads keyed by the versions of what they show (api.cache); one per process.
    cache: ResponseCache = field(default_factory=ResponseCache)
    # The limiter of short blocking work (settings.quick_threads; api.reads.quick), made on the
    # event loop when the app starts; None before: such work then takes anyio's default.
    quick_limiter: Any = None
    # The limiter of small reads on a server database (settings.server_read_threads;
    # api.reads.small_read), made with the one above.
    read_limiter: Any = None
    # PostgreSQL: finished trials' documents read on the event loop (storage.async_reads).
    trial_documents: Any = None
    # The keys' database reads kept for the generation they were read at (api.reads).
    generation_memo: Any = field(default_factory=lambda: _generation_memo())

    @classmethod
    def open(
        cls,
        settings: Settings,
        *,
        migrate: bool = True,
        run_studies: bool | None = None,
        prescreen: bool = True,
    ) -> ServiceState:
        from normfree import storage

        store = storage.open(settings, migrate=migrate, optuna=False)
        if migrate:  # the process that starts the server (not each of --workers N)
            recover_at_start(store)
        runner: Any = None
        if run_studies or run_studies is None:
            if settings.ray_jobs_address:
                from normfree.workers.jobs import RayJobRunner

                runner = RayJobRunner(settings)
            else:
                runner = StudyRunner(settings)
        cache = ResponseCache(
            stale_window_s=settings.read_stale_window_s, fresh_wait_s=settings.read_fresh_wait_s
        )
        return cls(settings=settings, store=store, runner=runner, prescreen=prescreen, cache=cache)

    @property
    def repo(self) -> RepositoryLike:
        return self.store.repo

    @property
    def db(self) -> Any:
        return self.store.db

    def verify_token(self, token: str) -> str | None:
        """The token's name when it is active, else None (recorded as a submission's submitter).

        One indexed read (``Repository.token_principal``): every write request pays it.
        """
        who = self.principal(token)
        return None if who is None else who.name

    def principal(self, token: str) -> Principal | None:
        """The active, unexpired token as a ``Principal`` (id, name, scope), else None."""
        if not token or len(token) > 256:
            return None
        return self.repo.token_principal(token)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.store.close()


def _generation_memo() -> Any:
    from normfree.api.reads import GenerationMemo

    return GenerationMemo()
