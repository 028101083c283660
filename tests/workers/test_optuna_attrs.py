"""Every Optuna study normfree creates names itself (issue 27, point 6): optuna-dashboard reads
only Optuna's storage, so the study's user attributes are all it can show of proxy, kind,
normfree study id, metric and direction."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from normfree.specs import StudySpec
from normfree.workers.driver import StudyDriver, create_study, optuna_study_name
from tests.workers.engine_support import engine_settings

SPECS = {
    "search": StudySpec(
        kind="search",
        name="a search",
        proxy="vit-tiny",
        functions=["erf", "tanh"],
        sampler="random",
        n_trials=2,
        epochs=1,
    ),
    "property": StudySpec(
        kind="property",
        proxy="vit-tiny",
        seeds=1,
        functions=["erf"],
        transform="shift_h",
        values=[0.0, 1.0],
        epochs=1,
    ),
    "options": StudySpec(kind="options", proxy="vit-tiny", seeds=1, functions=["erf"], epochs=1),
}


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_the_optuna_study_stores_what_normfree_knows_of_it(tmp_path: Path, kind: str) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = SPECS[kind]
    study_id = create_study(spec, settings=settings)
    storage = StudyDriver(study_id, settings=settings).store.optuna_storage()
    attrs = optuna.load_study(study_name=optuna_study_name(study_id), storage=storage).user_attrs
    assert attrs["normfree_study_id"] == study_id
    assert attrs["proxy"] == "vit-tiny" and attrs["kind"] == kind
    assert attrs["metric"] == "val_acc" and attrs["direction"] == "maximize"
    assert attrs.get("name") == spec.name
    # what optuna-dashboard lists: the summaries carry them too
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.user_attrs == attrs


def test_a_study_without_attributes_gets_them_when_its_driver_starts(tmp_path: Path) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    study_id = create_study(SPECS["search"], settings=settings)
    storage = StudyDriver(study_id, settings=settings).store.optuna_storage()
    # as a study created before the attributes existed: strip them from Optuna's tables
    ostudy = optuna.load_study(study_name=optuna_study_name(study_id), storage=storage)
    sid = storage.get_study_id_from_name(optuna_study_name(study_id))
    import sqlalchemy as sa

    with storage.engine.begin() as conn:  # RDBStorage: no public API removes an attribute
        conn.execute(sa.text("DELETE FROM study_user_attributes WHERE study_id = :s"), {"s": sid})
    assert ostudy.user_attrs == {}
    StudyDriver(study_id, settings=settings)
    reloaded = optuna.load_study(study_name=optuna_study_name(study_id), storage=storage)
    assert reloaded.user_attrs["normfree_study_id"] == study_id
    assert reloaded.user_attrs["kind"] == "search"
