"""One study validation (``workers.validation``) through ``driver.create_study``, the Python
door: a study naming a stored candidate is baked, and its trials build with no database."""

from __future__ import annotations

from pathlib import Path

import pytest

from normfree.search_space import parse
from normfree.specs import StudySpec, TrialConfig
from normfree.workers.driver import create_study
from normfree.workers.execution import TrialStore
from normfree.workers.scheduling import plan_grid
from normfree.workers.validation import StudyInvalid, study_problems
from tests.workers.engine_support import engine_settings

SOFTSIGN15 = "1.5*u/(1+abs(u))"


def _store(tmp_path: Path):
    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    store = TrialStore(settings.database_url, settings.optuna_storage_url)
    store.migrate()
    store.repo.upsert_candidate(parse(SOFTSIGN15, name="softsign15"))
    return settings, store


def test_a_study_of_a_stored_name_trains_from_its_baked_spec_without_a_database(
    tmp_path: Path,
) -> None:
    from normfree.workers.trainer import train_trial

    settings, store = _store(tmp_path)
    spec = StudySpec(
        kind="property",
        proxy="vit-tiny",
        seeds=1,
        epochs=1,
        functions=["erf", "softsign15"],
        transform="shift_h",
        values=[0.5],
    )
    study_id = create_study(spec, settings=settings)
    assert store.repo.get_study_spec(study_id).definitions == {"softsign15": SOFTSIGN15}
    configs = {
        r["candidate"]: TrialConfig.model_validate(r["config"])
        for r in store.repo.list_trials(study_id)
    }
    baked = configs["shift_h(softsign15, 0.5)"]
    assert baked.norm.formula == f"shift_h({SOFTSIGN15}, 0.5)"
    assert configs["shift_h(erf, 0.5)"].norm.formula is None  # the catalog needs no baking
    # The worker side: no database at all (the file is gone), the same function is built.
    store.db.engine.dispose()
    (tmp_path / "nf.db").unlink()
    result = train_trial(baked, threads=1)
    assert result.status in ("complete", "diverged"), result.error
    assert result.config["norm"]["formula"] == baked.norm.formula


def test_a_typo_is_refused_with_the_nearest_name_and_nothing_is_written(tmp_path: Path) -> None:
    settings, store = _store(tmp_path)
    spec = StudySpec(kind="options", proxy="vit-tiny", functions=["erff"], options={"alpha0": [1]})
    with pytest.raises(StudyInvalid, match="did you mean 'erf'"):
        create_study(spec, settings=settings)
    with pytest.raises(StudyInvalid, match="did you mean 'softsign15'"):
        create_study(spec.model_copy(update={"functions": ["softsing15"]}), settings=settings)
    assert store.repo.list_studies() == []


def test_every_cell_of_a_property_study_is_checked() -> None:
    # clip's lam must be > 0: each function's cell at -1 fails, not only the first function's.
    spec = StudySpec(
        kind="property",
        proxy="vit-tiny",
        functions=["erf", "u/(1+abs(u))"],
        transform="clip",
        values=[1, -1],
    )
    problems, _ = study_problems(spec)
    assert problems == [
        "cell clip(erf, -1): clip(): lam must be > 0",
        "cell clip(u/(1+abs(u)), -1): clip(): lam must be > 0",
    ]


def test_the_whole_study_is_reported_at_once() -> None:
    spec = StudySpec(
        kind="options",
        proxy="vit-tinny",
        functions=["tahn", "linear_part(erf, 0.1)"],
        options={"alpah0": [1.0]},
        baselines=["layernrom"],
    )
    problems, _ = study_problems(spec)
    text = "\n".join(problems)
    assert "proxy: unknown 'vit-tinny' (did you mean 'vit-tiny'" in text
    assert "'tahn': unknown function 'tahn'; did you mean 'tanh'" in text
    assert "linear_part" not in text  # a nested transform of a catalog name is fine
    assert "baselines: 'layernrom'" in text


def test_a_parameterless_transform_of_a_stored_name_is_its_own_cell() -> None:
    spec = StudySpec(
        kind="property",
        proxy="vit-tiny",
        seeds=1,
        functions=["softsign15"],
        transform="sign_flip",
        params={"untransformed_cell": True},
        definitions={"softsign15": SOFTSIGN15},
    )
    (trial,) = plan_grid(spec)
    assert trial.config.norm.name == "sign_flip(softsign15)"
    assert trial.config.norm.formula == f"sign_flip({SOFTSIGN15})"
