"""The published operator by default, and a screen's shape and placement (issue 25, point 4)."""

from __future__ import annotations

from normfree.search_space.catalog import SEARCH16
from normfree.specs import StudySpec, operator_label
from normfree.workers.screens import placement, screen_spec

SIXTEEN = list(SEARCH16)


def test_a_ranking_of_the_16_gets_the_published_operator_unless_it_names_one() -> None:
    assert StudySpec(kind="options", proxy="p", functions=SIXTEEN).norm_shift == "scalar"
    assert StudySpec(kind="search", proxy="p", functions=[*SIXTEEN, "u"]).norm_shift == "scalar"
    # property studies run without s (the paper's ablations did)
    prop = StudySpec(kind="property", proxy="p", functions=SIXTEEN, transform="shift_h")
    assert prop.norm_shift == "none"
    # a study of some of them, one that names its shift, or one with a shift option: as asked
    assert StudySpec(kind="options", proxy="p", functions=SIXTEEN[:15]).norm_shift == "none"
    named = StudySpec(kind="options", proxy="p", functions=SIXTEEN, norm_shift="none")
    assert named.norm_shift == "none"
    opt = StudySpec(kind="options", proxy="p", functions=SIXTEEN, options={"shift": ["none"]})
    assert opt.norm_shift == "none"
    # a stored spec reads back as stored
    assert StudySpec.model_validate(named.model_dump(mode="json")).norm_shift == "none"


def test_labels_name_the_operator_one_way() -> None:
    assert operator_label("erf", "scalar") == "erf + s"
    assert operator_label("erf") == "erf"
    assert operator_label("tanh", "none", 1.0) == "tanh (alpha fixed at 1)"


def test_a_screen_is_the_16_and_the_function_with_s_beside_layernorm_and_no_norm() -> None:
    spec = screen_spec("u/(1+u*u)", "vit-screen-heldout")
    assert spec.functions == [*SIXTEEN, "u/(1+u*u)"] and spec.kind == "options"
    assert spec.options == {"shift": ["scalar"]} and spec.baselines == ["layernorm", "identity"]
    assert screen_spec("erf", "dit-screen").functions == SIXTEEN  # one of them: not twice


def _row(name: str, mean: float, rank: int, seeds: dict[int, float]) -> dict:
    return {
        "candidate": name, "norm": {"name": name, "shift": "scalar"}, "overrides": {},
        "rank": rank, "ranked": True, "n": len(seeds), "mean": mean, "std": 0.01,
        "seed_values": seeds, "direction": "maximize", "objective": "val_acc",
        "n_diverged": 0, "n_failed": 0, "vs_layernorm": None,
    }  # fmt: skip


def test_placement_counts_the_16_above_below_and_within_noise() -> None:
    rows = [_row(n, 0.9 - 0.01 * i, i + 1, {s: 0.9 - 0.01 * i + 0.001 * s for s in range(3)})
            for i, n in enumerate(SIXTEEN)]  # fmt: skip
    rows.insert(5, _row("mine", 0.8551, 6, {0: 0.855, 1: 0.856, 2: 0.855}))
    p = placement(rows, "mine", "vit-tiny", fidelity_headline="fidelity vs published: x")
    assert p["found"] and p["of"] == 17
    assert p["among_16"] == 6  # five of the 16 above it (0.90-0.86), then it (0.8551)
    assert len(p["beats"]) + len(p["trails"]) + len(p["within_noise"]) == 16
    assert abs(p["noise"] - 0.02) < 1e-9  # 2 pooled seed stds of 0.01
    # within 0.02 of 0.8551: 0.87, 0.86, 0.85, 0.84; it trails 0.90-0.88, beats 0.83-0.75
    assert len(p["within_noise"]) == 4 and len(p["trails"]) == 3 and len(p["beats"]) == 9
    assert p["reliability"]["seeds"] == 3 and p["text"].startswith("mine + s on vit-tiny: 6 of 17")
    assert "fidelity vs published" in p["text"]
    missing = placement(rows, "nope", "vit-tiny")
    assert not missing["found"] and missing["rank"] is None and "not ranked" in missing["text"]


def test_a_study_of_the_16_runs_and_labels_them_with_s_and_its_baselines_without() -> None:
    from normfree.api.services.studies import arm_of
    from normfree.workers.scheduling import plan_grid

    spec = StudySpec(kind="options", proxy="vit-tiny", functions=SIXTEEN, seeds=1,
                     baselines=["layernorm"])  # fmt: skip
    planned = plan_grid(spec)
    by = {p.config.norm.name: p for p in planned}
    assert by["erf"].config.norm.shift == "scalar" and by["layernorm"].config.norm.shift == "none"
    trial = {"candidate": "erf", "axis_values": by["erf"].axis_values}
    assert arm_of(trial, None)[1] == "erf + s"
    ln = {"candidate": "layernorm", "axis_values": by["layernorm"].axis_values}
    assert arm_of(ln, None)[1] == "layernorm"
    prop = StudySpec(kind="property", proxy="vit-tiny", functions=["erf"], seeds=1,
                     transform="shift_h", values=[0.5])  # fmt: skip
    (cell,) = plan_grid(prop)
    assert cell.config.norm.shift == "none" and "shift" not in cell.axis_values
