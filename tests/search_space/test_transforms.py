"""Transforms: named, composable, parameterised, with lineage; text and Python APIs agree."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

from normfree.search_space import ExpressionError, evaluate, parse, transforms

U = np.linspace(-6, 6, 1201)


def test_resolve_transform_call_records_lineage(catalog):
    c = catalog.resolve("shift_h(erf, 0.5)")
    assert c.name == c.formula == "shift_h(erf, 0.5)"
    assert c.lineage.base == "erf"
    assert [(s.transform, s.params) for s in c.lineage.steps] == [("shift_h", {"lam": 0.5})]
    assert c.lineage.call == "shift_h(erf, 0.5)"
    assert c.group == "natural" and c.citation == catalog.get("erf").citation
    np.testing.assert_allclose(evaluate(c, U), scipy.special.erf(U + 0.5), rtol=1e-13)


def test_nested_calls_and_python_api_agree(catalog):
    c = catalog.resolve("sign_flip(shift_h(tanh, 0.1))")
    assert [s.transform for s in c.lineage.steps] == ["shift_h", "sign_flip"]
    assert c.lineage.steps[1].params == {}
    np.testing.assert_allclose(evaluate(c, U), -np.tanh(U + 0.1), rtol=1e-13)
    py = transforms.sign_flip(transforms.shift_h(catalog.get("tanh"), 0.1))
    assert py.name == c.name and py.canonical == c.canonical and py.lineage == c.lineage
    assert catalog.resolve("  sign_flip( shift_h( tanh ,0.1 ) )").canonical == c.canonical
    deep = catalog.resolve("clip(linear_part(flat_centre(shift_v(asinh, -0.5), 1), 0.1), 2)")
    assert [s.transform for s in deep.lineage.steps] == [
        "shift_v", "flat_centre", "linear_part", "clip"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "reference"),
    [
        ("shift_h(erf, -2)", lambda u: scipy.special.erf(u - 2)),
        ("shift_v(tanh, 0.1)", lambda u: np.tanh(u) + 0.1),
        ("clip(asinh, 0.8)", lambda u: np.clip(np.arcsinh(u), -0.8, 0.8)),
        ("clip(logsign, 3)", lambda u: np.clip(np.sign(u) * np.log1p(np.abs(u)), -3, 3)),
        ("linear_part(isru, 0.01)", lambda u: 0.99 * u / np.sqrt(u**2 + 1) + 0.01 * u),
        (
            "flat_centre(arctan, 0.5)",
            lambda u: np.where(np.abs(u) <= 0.5, 0.0, 2 / np.pi * np.arctan(u - 0.5 * np.sign(u))),
        ),
        ("sign_flip(erf)", lambda u: -scipy.special.erf(u)),
    ],
)
def test_each_transform_is_the_documented_formula(catalog, call, reference):
    np.testing.assert_allclose(
        evaluate(catalog.resolve(call), U), reference(U), rtol=1e-12, atol=1e-14
    )


def test_paper_grids_are_data_and_all_cells_resolve(catalog):
    assert set(transforms.PAPER_GRIDS) >= {
        "shift_h", "shift_v", "clip", "linear_part", "flat_centre", "sign_flip", "growth",
        "non_monotonic",
    }  # fmt: skip
    assert transforms.PAPER_GRIDS["shift_h"]["values"] == (
        -2.0, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.0
    )  # fmt: skip
    assert transforms.PAPER_GRIDS["clip"]["bases"] == ("asinh", "logsign", "linear")
    assert None in transforms.PAPER_GRIDS["clip"]["values"]  # unclipped too
    calls = transforms.grid_calls("shift_h")
    assert len(calls) == 27 and "shift_h(erf, -0.1)" in calls
    assert "asinh" in transforms.grid_calls("clip")
    assert transforms.grid_calls("sign_flip") == [
        "sign_flip(erf)", "sign_flip(tanh)", "sign_flip(arctan)"
    ]  # fmt: skip
    for study in transforms.PAPER_GRIDS:
        for call in transforms.grid_calls(study):
            assert catalog.resolve(call).name == call


def test_transform_of_a_user_formula(catalog):
    mine = parse("u/(1+abs(u))", name="mine")
    c = transforms.flat_centre(mine, 1)
    assert c.name == "flat_centre(mine, 1)"
    assert c.lineage.base == "mine" and c.lineage.formula == "u/(1+abs(u))"
    assert c.properties.flat_halfwidth == 1.0


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        ("shift_h(erf)", "1 parameter"),
        ("sign_flip(erf, 1)", "0 parameter"),
        ("shift_h(erf, 1, 2)", "1 parameter"),
        ("clip(asinh, 0)", "lam must be > 0"),
        ("flat_centre(erf, -1)", "lam must be >= 0"),
        ("shift_h(erf, 1e9)", "within"),
        ("shift_h(erf, u)", "must be numbers"),
        ("shift_h(nope(erf), 1)", "unknown transform"),
        ("shift_h(shift_h(erf, 1), pi)", "must be numbers"),
        ("shift_h(erf, 1) + 1", "unexpected"),
    ],
)
def test_bad_transform_calls(catalog, call, fragment):
    with pytest.raises(ExpressionError, match=fragment):
        catalog.resolve(call)


def test_python_api_errors(catalog):
    with pytest.raises(ExpressionError, match="unknown transform"):
        transforms.apply("rotate", catalog.get("erf"), 1)
    with pytest.raises(ExpressionError, match="not a number"):
        transforms.shift_h(catalog.get("erf"), "abc")
    with pytest.raises(ExpressionError, match="within"):
        transforms.shift_h(catalog.get("erf"), float("nan"))


def test_transform_names_do_not_shadow_formulas(catalog):
    assert catalog.resolve("clip(u)").group == "user"  # the formula function clip
    assert catalog.resolve("clip(u, -2, 2)").lineage.steps == ()
    assert catalog.resolve("sin") is catalog.get("sin")
    assert catalog.resolve("sin(u)").group == "user"
    with pytest.raises(ExpressionError, match="nested too deeply"):
        catalog.resolve("sign_flip(" * 20 + "erf" + ")" * 20)
