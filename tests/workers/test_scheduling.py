"""Scheduling is pure: StudySpec in, TrialConfigs and Optuna objects out. No DB, no Ray."""

from __future__ import annotations

import optuna
import pytest

from normfree.specs import StudySpec
from normfree.testing.seeding import property_spec
from normfree.workers import scheduling as sch
from normfree.workers.kinds import search


def _property(**kw: object) -> StudySpec:
    return property_spec(**({"seeds": 3, "values": [-1.0, 0.0, 0.5], "epochs": None} | kw))


def test_property_grid_is_full_and_paired() -> None:
    planned = sch.plan_grid(_property())
    cells = [p for p in planned if p.role == "cell"]
    baselines = [p for p in planned if p.role == "baseline"]
    assert len(cells) == 2 * 3 * 3 and len(baselines) == 3
    names = {p.config.norm.name for p in cells}
    assert "shift_h(erf, -1)" in names and "shift_h(tanh, 0.5)" in names
    # Paired: every cell and the baseline carry exactly the same seeds.
    by_arm: dict[str, set[int]] = {}
    for p in planned:
        by_arm.setdefault(p.config.norm.name, set()).add(p.config.seed)
    assert all(seeds == {0, 1, 2} for seeds in by_arm.values())
    # Seed-major order: one full seed of every cell before the next seed.
    assert [p.config.seed for p in planned[: len(by_arm)]] == [0] * len(by_arm)
    # Keys are unique (the same config is never trained twice).
    assert len({p.config.key() for p in planned}) == len(planned)


def test_property_values_never_use_exponent_notation() -> None:
    assert sch.format_value(1e-5) == "0.00001"
    assert sch.transform_call("shift_v", "erf", -0.1) == "shift_v(erf, -0.1)"


def test_property_grid_resolves_in_the_catalog() -> None:
    from normfree.search_space import catalog

    for p in sch.plan_grid(_property(seeds=1)):
        if p.role == "cell":
            assert catalog.resolve(p.config.norm.name).name == p.config.norm.name


def test_paper_grid_defaults_and_untransformed_cell() -> None:
    fns, values, untransformed = sch.paper_grid("clip")
    assert fns == ["asinh", "logsign", "linear"] and 5.0 in values and untransformed
    spec = _property(
        transform="clip",
        functions=fns,
        values=values,
        baselines=[],
        seeds=1,
        params={"untransformed_cell": True},
    )
    names = {p.config.norm.name for p in sch.plan_grid(spec)}
    assert "asinh" in names and "clip(asinh, 0.5)" in names
    assert sch.untransformed_name("sign_flip", "erf") == "sign_flip(erf)"


def test_options_cross_splits_norm_options_from_overrides() -> None:
    spec = StudySpec(
        kind="options",
        proxy="vit-tiny",
        seeds=2,
        functions=["erf"],
        options={
            "layerscale_init": ["off", 1e-5, 1e-1],
            "depth_scaled_init": [False, True],
            "shift": ["none", "scalar", "channel"],
            "alpha0": [0.5, 1.0],
        },
        baselines=["layernorm"],
    )
    planned = sch.plan_grid(spec)
    cells = [p for p in planned if p.role == "cell"]
    assert len(cells) == 3 * 2 * 3 * 2 * 2
    c = cells[0].config
    assert set(c.overrides) == {"layerscale_init", "depth_scaled_init"}
    assert c.overrides["layerscale_init"] == 0.0  # "off"
    assert {p.config.norm.shift for p in cells} == {"none", "scalar", "channel"}
    assert {p.config.norm.alpha0 for p in cells} == {0.5, 1.0}
    # LayerNorm sits beside each model-option combination (not the norm options: 6 x 2 seeds).
    baselines = [p for p in planned if p.role == "baseline"]
    assert len(baselines) == 6 * 2
    assert all(p.config.norm.shift == "none" for p in baselines)


def test_grid_rejects_bad_specs() -> None:
    with pytest.raises(ValueError):
        sch.plan_grid(_property(functions=[]))
    with pytest.raises(ValueError):
        sch.plan_grid(StudySpec(kind="search", proxy="vit-tiny"))


def test_search_space_samplers_and_pruners() -> None:
    spec = StudySpec(
        kind="search",
        proxy="vit-tiny",
        functions=["erf", "tanh", "isru"],
        sampler="tpe",
        pruner="sha",
        params={"alpha0_range": [0.1, 2.0], "lr_range": [1e-4, 1e-2]},
    )
    dists = search.search_distributions(spec)
    assert set(dists) == {"norm", "alpha0", "lr"}
    assert isinstance(sch.make_sampler(spec), optuna.samplers.TPESampler)
    assert isinstance(sch.make_pruner(spec), optuna.pruners.SuccessiveHalvingPruner)
    hb = spec.model_copy(update={"pruner": "hyperband", "epochs": 9})
    assert isinstance(sch.make_pruner(hb), optuna.pruners.HyperbandPruner)
    cfg = search.config_from_params(spec, {"norm": "erf", "alpha0": 0.3, "lr": 2e-3}, seed=4)
    assert cfg.norm.name == "erf" and cfg.norm.alpha0 == 0.3 and cfg.lr == 2e-3 and cfg.seed == 4
    # The whole catalog is the default candidate set; baselines are not candidates.
    everything = search.search_functions(spec.model_copy(update={"functions": []}))
    assert "erf" in everything and "layernorm" not in everything
    assert sch.objective_of("vit-tiny") == ("val_acc", "maximize")


def test_extra_seeds_go_to_the_best_arms() -> None:
    spec = StudySpec(
        kind="search",
        proxy="vit-tiny",
        functions=["a", "b", "c", "d"],
        extra_seeds_for_top=2,
        params={"top_arms": 2},
    )
    finished = [
        ({"norm": "a"}, 0.5),
        ({"norm": "b"}, 0.9),
        ({"norm": "c"}, 0.7),
        ({"norm": "d"}, 0.1),
    ]
    planned = search.plan_extra_seeds(spec, finished, "maximize")
    assert sorted({p.config.norm.name for p in planned}) == ["b", "c"]
    assert sorted({p.config.seed for p in planned}) == [1, 2]
    low = search.plan_extra_seeds(spec, finished, "minimize")
    assert sorted({p.config.norm.name for p in low}) == ["a", "d"]
