"""Study creation as one recoverable unit (issue 28, point 4), without a server: the states a
crash can leave, and what the next start (``ServiceState.open``) makes of them. The kill of a
real server is in tests/cli/test_crash_recovery.py."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from normfree.api.services import ServiceState
from normfree.specs import StudySpec
from normfree.workers import kinds
from normfree.workers.driver import StudyDriver, _load_optuna, create_study, optuna_study_name
from normfree.workers.execution import TrialStore
from tests.workers.engine_support import engine_settings

SPEC = StudySpec(kind="options", proxy="vit-tiny", seeds=2, functions=["erf"], epochs=1)


def _store(settings) -> TrialStore:
    store = TrialStore(settings.database_url, settings.optuna_storage_url)
    store.migrate()
    return store


def test_a_creation_cut_off_is_removed_at_the_next_start(tmp_path: Path) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    whole = create_study(SPEC, settings=settings)
    store = _store(settings)
    assert store.repo.get_study(whole)["status"] == "pending"
    # what a process killed after the Optuna study and half the trials leaves behind
    cut = store.repo.create_study(SPEC, status="creating")
    _load_optuna(store, SPEC, cut)
    planned = kinds.get(SPEC.kind).plan(SPEC)
    store.repo.add_trials(cut, [(p.config, p.axis_values) for p in planned[:1]])
    # a creating study hands out nothing: no driver may run half a plan
    assert store.repo.lease_next(cut, "someone", 30.0) is None
    names = optuna.get_all_study_names(storage=store.optuna_storage())
    assert optuna_study_name(cut) in names
    with pytest.raises(RuntimeError, match="still being created"):
        StudyDriver(cut, settings=settings, store=store).run()

    state = ServiceState.open(settings, run_studies=False)  # the next start
    try:
        assert state.repo.get_study(cut) is None
        assert state.repo.list_trials(cut) == []
        assert state.repo.get_study(whole)["status"] == "pending"  # untouched
        assert len(state.repo.list_trials(whole)) == len(planned)
    finally:
        state.close()
    names = optuna.get_all_study_names(storage=_store(settings).optuna_storage())
    assert optuna_study_name(cut) not in names and optuna_study_name(whole) in names


def test_a_failed_creation_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    store = _store(settings)

    def broken(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(store.repo, "add_trials", broken)
    with pytest.raises(OSError, match="disk full"):
        create_study(SPEC, settings=settings, store=store)
    assert store.repo.list_studies() == []
    assert optuna.get_all_study_names(storage=store.optuna_storage()) == []
