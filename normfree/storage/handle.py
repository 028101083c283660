"""``storage.open(settings)``: the one way any layer opens storage.

A :class:`Storage` is our database (a :class:`Database` and the :class:`Repository` over it) and,
opened on first use, Optuna's RDB storage beside it (a sibling database: both name their tables
``studies`` and ``trials``). The CLI, the API, the study driver and Ray workers all open it
here, so connection settings (SQLite's lock timeout for Optuna's many writers, PostgreSQL's
pre-ping) and migration are decided once.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from normfree.storage.db import Database, ensure_database, optuna_storage_url
from normfree.storage.repository import Repository


class Storage:
    """Our database, its repository and (lazily) Optuna's storage, for one database URL."""

    def __init__(
        self, database_url: str, optuna_url: str | None = None, *, max_attempts: int | None = None
    ) -> None:
        self.db = Database(database_url)
        self.url = self.db.url
        self.repo = Repository(self.db, max_attempts=max_attempts)
        self.optuna_url = optuna_storage_url(
            SimpleNamespace(database_url=self.url, optuna_storage_url=optuna_url)
        )
        self._optuna: Any = None

    def migrate(self, *, optuna: bool = True) -> None:
        """Bring the schemas up (idempotent): ours through Alembic, then Optuna's (which the
        API, a reader of Optuna's records only, leaves to the first driver)."""
        ensure_database(self.url)
        self.db.migrate()
        if optuna:
            self.optuna_storage()

    def optuna_storage(self) -> Any:
        """Optuna's RDB storage (one engine per handle), created on first use."""
        if self._optuna is None:
            import optuna

            ensure_database(self.optuna_url)
            kwargs: dict[str, Any] = {}
            if self.optuna_url.startswith("sqlite"):
                # Several processes report to it; wait for the lock instead of failing.
                kwargs = {"connect_args": {"timeout": 30}}
            else:
                kwargs = {"pool_pre_ping": True}
            self._optuna = optuna.storages.RDBStorage(self.optuna_url, engine_kwargs=kwargs)
        return self._optuna

    def study_status(self, study_id: int) -> str:
        """A study's status; KeyError when there is no such study."""
        study = self.repo.get_study(study_id)
        if study is None:
            raise KeyError(f"no study {study_id}")
        return str(study["status"])

    def close(self) -> None:
        """Release the connections (a handle opened for one command)."""
        self.db.dispose()
        if self._optuna is not None:
            self._optuna.engine.dispose()


def open(settings: Any, *, migrate: bool = True, optuna: bool = True) -> Storage:
    """Storage as ``settings`` name it (``database_url``, ``optuna_storage_url``,
    ``max_attempts``), schemas upgraded unless ``migrate=False`` (Optuna's too unless
    ``optuna=False``). Named after the builtin on purpose: ``storage.open(settings)``."""
    store = Storage(
        settings.database_url,
        getattr(settings, "optuna_storage_url", None),
        max_attempts=getattr(settings, "max_attempts", None),
    )
    if migrate:
        store.migrate(optuna=optuna)
    return store
