"""Property importance on synthetic studies where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from normfree.workers.importance import FEATURES, features_of, property_importance


def _props(i: int) -> dict:
    """An orthogonal design: bounded is bit 0 of i, the other flags are higher bits."""
    bounded = i % 2 == 0
    return {
        "f0": 0.0,
        "zero_centred": (i >> 1) % 2 == 0,
        "odd": (i >> 2) % 2 == 0,
        "bounded": bounded,
        "growth": "bounded" if bounded else ("logarithmic", "linear")[(i >> 1) % 2],
        "monotone": "increasing",
        "slope0": 0.2 + 0.1 * (i >> 1),
        "flat_halfwidth": 0.0,
        "continuous": True,
        "differentiable": (i >> 3) % 2 == 0,
        "turning_points": [],
    }


def _study(n: int = 32, seeds: int = 2, effect: float = 0.1, direction: str = "maximize"):
    """Candidates whose accuracy depends on boundedness only (plus seed noise)."""
    rng = np.random.default_rng(0)
    props, rows = {}, []
    for i in range(n):
        name = f"c{i}"
        props[name] = _props(i)
        for s in range(seeds):
            acc = 0.8 + effect * props[name]["bounded"] + rng.normal(0, 0.02)
            value = acc if direction == "maximize" else 1 - acc  # e.g. an error rate
            rows.append({"candidate": name, "status": "COMPLETE", "value": value, "seed": s})
    return rows, props


def test_the_property_that_matters_comes_first_with_a_ci_off_zero() -> None:
    rows, props = _study()
    out = property_importance(rows, props, "maximize", n_boot=400)
    feats = {f["name"]: f for f in out["features"]}
    assert out["n_candidates"] == 32
    assert out["features"][0]["name"] in ("bounded", "growth")  # growth encodes bounded too
    b = feats["bounded"]
    assert b["rho"] > 0.8 and b["ci_low"] > 0.5 and b["significant"]
    # noise features: intervals that include 0
    for name in ("slope0", "odd", "zero_centred", "differentiable"):
        f = feats[name]
        assert f["ci_low"] < 0 < f["ci_high"] and not f["significant"], name
    # constant in this study: reported as constant, no rho
    for name in ("monotone", "continuous", "flat_halfwidth", "abs_f0", "turning_points"):
        assert feats[name]["constant"] and feats[name]["rho"] is None, name


def test_direction_minimize_keeps_the_meaning_of_the_sign() -> None:
    rows, props = _study(direction="minimize")
    feats = {
        f["name"]: f for f in property_importance(rows, props, "minimize", n_boot=200)["features"]
    }
    assert feats["bounded"]["rho"] > 0.8  # bounded is still *good*, error rates fall


def test_diverged_candidates_rank_last() -> None:
    rows, props = _study(effect=0.0)
    # every unbounded candidate diverges: boundedness now predicts results
    rows = [
        {**r, "status": "DIVERGED", "value": None} if not props[r["candidate"]]["bounded"] else r
        for r in rows
    ]
    feats = {f["name"]: f for f in property_importance(rows, props, n_boot=200)["features"]}
    assert feats["bounded"]["rho"] > 0.8


def test_too_few_candidates_and_baselines() -> None:
    rows, props = _study(n=3)
    rows.append({"candidate": "layernorm", "status": "COMPLETE", "value": 0.99, "seed": 0})
    out = property_importance(rows, props)
    assert out["n_candidates"] == 3 and out["features"] == [] and "needs at least" in out["note"]


def test_reproducible_for_a_seed() -> None:
    rows, props = _study()
    assert property_importance(rows, props, n_boot=100, seed=1) == property_importance(
        rows, props, n_boot=100, seed=1
    )


@pytest.mark.parametrize("name", list(FEATURES))
def test_features_of_real_catalog_properties(name: str) -> None:
    from normfree.search_space import catalog

    for c in (catalog.get("erf"), catalog.get("logsign"), catalog.get("sin")):
        value = features_of(c.properties.model_dump(mode="json"))[name]
        assert np.isfinite(value), (c.name, name)


def test_small_studies_get_honest_intervals() -> None:
    """Five candidates cannot establish a property's effect, however tidy the ranks look."""
    rows, props = _study(n=5, seeds=1)
    feats = {f["name"]: f for f in property_importance(rows, props, n_boot=200)["features"]}
    b = feats["bounded"]
    assert b["rho"] > 0.5 and b["ci_low"] < 0 < b["ci_high"] and not b["significant"]
