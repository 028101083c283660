"""The study-kind contract: one registry, typed params, and what each kind plans and accepts."""

from __future__ import annotations

import optuna
import pytest

from normfree.specs import StudySpec
from normfree.workers import kinds


def test_every_kind_is_registered_once() -> None:
    # the registry is the one list of kinds: a spec names a registered one
    StudySpec(kind="search", proxy="vit-tiny")
    with pytest.raises(ValueError, match="unknown study kind"):
        StudySpec(kind="nope", proxy="vit-tiny")
    with pytest.raises(ValueError, match="registered twice"):
        kinds.register(kinds.get("search"))
    with pytest.raises(ValueError, match="unknown study kind 'nope'"):
        kinds.get("nope")


def test_params_are_typed_per_kind() -> None:
    spec = StudySpec(kind="search", proxy="vit-tiny", params={"alpha0_range": [0.1, 2], "seed0": 3})
    params = kinds.get("search").params(spec)
    assert params.alpha0_range == (0.1, 2.0) and params.seed0 == 3 and params.top_arms == 3
    for bad in ({"top_arms": "x"}, {"seed0": "3"}, {"affine": "no"}, {"lr": -1.0}):
        with pytest.raises(ValueError):
            kinds.get("search").params(StudySpec(kind="search", proxy="p", params=bad))
    # one model types every kind's keys (workers.cost checks requests with it)
    assert set(kinds.StudyParams.model_fields) == kinds.param_names() - {
        "generations", "population", "children", "tournament", "p_crossover", "constraints",
        "max_size", "max_depth", "max_proposals", "max_prescreen", "prescreen",
    }  # fmt: skip
    names = kinds.param_names()
    assert {"seed0", "untransformed_cell", "lr_range", "generations", "constraints"} <= names
    assert "untransformed_cell" not in kinds.get("search").param_names()


def test_grid_kinds_plan_and_the_others_ask() -> None:
    prop = StudySpec(
        kind="property", proxy="vit-tiny", functions=["erf"], transform="shift_h",
        values=[-1.0, 1.0], baselines=["layernorm"], seeds=2,
    )  # fmt: skip
    assert len(kinds.get("property").plan(prop)) == 6
    assert kinds.get("property").trial_count(prop) == 4  # cells x seeds (baselines aside)
    opts = StudySpec(
        kind="options", proxy="vit-tiny", functions=["erf", "tanh"],
        options={"alpha0": [0.5, 1.0], "depth": [2, 4]}, seeds=1,
    )  # fmt: skip
    assert len(kinds.get("options").plan(opts)) == kinds.get("options").trial_count(opts) == 8
    search = StudySpec(kind="search", proxy="vit-tiny", functions=["erf"], pruner="sha")
    assert kinds.get("search").plan(search) == []
    assert isinstance(kinds.get("search").pruner(search), optuna.pruners.SuccessiveHalvingPruner)
    assert isinstance(kinds.get("property").pruner(prop), optuna.pruners.NopPruner)


def test_each_kind_says_what_a_request_lacks() -> None:
    bare = StudySpec(kind="property", proxy="vit-tiny")
    found = kinds.get("property").problems(bare)
    assert any(p.startswith("functions:") for p in found)
    assert any(p.startswith("transform:") for p in found)
    assert kinds.get("options").problems(StudySpec(kind="options", proxy="p", functions=["erf"]))
    gen = StudySpec(kind="generate", proxy="vit-tiny", values=[1.0])
    assert "takes no transform" in kinds.get("generate").problems(gen)[0]
    with pytest.raises(ValueError, match="constraints"):
        kinds.get("generate").validate(
            StudySpec(kind="generate", proxy="vit-tiny", params={"constraints": "bounded and"})
        )


def test_every_kind_is_costed() -> None:
    """The cost gate asks the kind how many trials it will run (a grid's own, else a budget)."""
    from normfree.workers.cost import estimate

    search = StudySpec(
        kind="search", proxy="vit-tiny", functions=["erf", "tanh"], n_trials=4,
        extra_seeds_for_top=2, params={"top_arms": 1},
    )  # fmt: skip
    assert len(kinds.get("search").budget(search)) == 4 + 1 * 2
    gen = StudySpec(kind="generate", proxy="vit-tiny", seeds=2, params={"generations": 1})
    assert len(kinds.get("generate").budget(gen)) == kinds.get("generate").trial_count(gen)
    grid = StudySpec(kind="options", proxy="vit-tiny", functions=["erf"], options={"alpha0": [1]})
    assert len(kinds.get("options").budget(grid)) == len(kinds.get("options").plan(grid))
    for spec in (search, gen, grid):
        assert estimate(spec).trial_seconds > 0
