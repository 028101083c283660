"""Exact, kernel-safe derivatives: equal to finite differences away from kinks, the true slope at
sign-based kinks, a documented finite value at infinite slopes, never NaN, allowed nodes only."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
import torch

from normfree.search_space import U, evaluate, parse, transforms
from normfree.search_space._numeric import disallowed_nodes
from normfree.search_space.catalog import names as catalog_names
from tests.references import reference
from tests.search_space.expected import PROPERTIES

DENSE = np.unique(np.concatenate([np.linspace(-12, 12, 2401), [0.0, 1e-30, -1e-30, 1e-7]]))


def _transformed(catalog):
    """Every cell of the paper's grids (about 100 candidates)."""
    calls = []
    for study in ("shift_h", "shift_v", "clip", "linear_part", "flat_centre", "sign_flip"):
        calls += transforms.grid_calls(study)
    return [catalog.resolve(c) for c in calls]


@pytest.mark.parametrize("name", catalog_names())
def test_derivative_matches_finite_differences_of_the_reference(catalog, name):
    """Central differences of the *independent* reference, masked where it has a kink."""
    f = reference(name, "numpy")
    h = 1e-6
    u = np.linspace(-9, 9, 1801) + 0.0123  # off the integers and off 0
    u = u[np.abs(u) > 1e-2]
    central = (f(u + h) - f(u - h)) / (2 * h)
    left, right = (f(u) - f(u - h)) / h, (f(u + h) - f(u)) / h
    smooth = np.abs(left - right) <= 1e-4 * (1 + np.abs(central))
    got = evaluate(catalog.get(name), u, derivative=True)
    assert smooth.sum() > 1000
    np.testing.assert_allclose(got[smooth], central[smooth], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", [n for n, want in PROPERTIES.items() if "slope0" in want])
def test_slope_at_zero(catalog, name):
    """The exact derivative at 0, the float32/float64 kernels' and the property agree with the
    expected slope (``expected.PROPERTIES``: true slopes at kinks, secants where infinite)."""
    slope = PROPERTIES[name]["slope0"]
    c = catalog.resolve(name)
    exact = float(c.derivative.xreplace({U: sympy.S.Zero}))
    assert exact == pytest.approx(slope, rel=1e-12, abs=1e-15)
    for dtype in (torch.float32, torch.float64):
        got = c.torch_fn(derivative=True)(torch.zeros(3, dtype=dtype))
        assert got.dtype == dtype
        assert torch.isfinite(got).all()
        assert float(got[0]) == pytest.approx(slope, rel=1e-6)
    assert float(c.properties.slope0) == pytest.approx(slope, rel=1e-12)


def test_true_slope_is_the_limit_of_difference_quotients(catalog):
    """At u=0 the stored slope of expsign equals the limit of (f(h)-f(-h))/2h, h -> 0."""
    c = catalog.get("expsign")
    h = 1e-9
    fd = (evaluate(c, np.array([h])) - evaluate(c, np.array([-h]))) / (2 * h)
    assert fd[0] == pytest.approx(1.0, rel=1e-6)


def test_derivatives_are_finite_and_use_allowed_nodes_everywhere(catalog):
    cands = catalog.all() + _transformed(catalog)
    assert len(cands) > 100
    for c in cands:
        for e in (c.expr, c.derivative):
            assert not disallowed_nodes(e), (c.name, disallowed_nodes(e))
            assert not e.has(sympy.DiracDelta, sympy.Heaviside, sympy.Derivative), c.name
        pts = np.concatenate([DENSE, list(c.kinks)])
        for dtype in (torch.float32, torch.float64):
            x = torch.tensor(pts, dtype=dtype)
            assert torch.isfinite(c.torch_fn()(x)).all(), (c.name, dtype)
            assert torch.isfinite(c.torch_fn(derivative=True)(x)).all(), (c.name, dtype)


def test_shifted_kinks_get_the_true_slope_too(catalog):
    c = catalog.resolve("shift_h(expsign, 0.5)")
    assert c.kinks == (-0.5,)
    for dtype in (torch.float32, torch.float64):
        got = c.torch_fn(derivative=True)(torch.tensor([-0.5], dtype=dtype))
        assert float(got[0]) == pytest.approx(1.0)
    for call in ("shift_h(exproot, -0.1)", "shift_h(power23clip, -0.1)", "shift_h(saturlog, -0.1)"):
        c = catalog.resolve(call)
        assert c.kinks == (0.1,)
        for dtype in (torch.float32, torch.float64):
            x = torch.tensor([0.1, 0.0, 0.1 + 1e-7, 0.1 - 1e-7], dtype=dtype)
            got = c.torch_fn(derivative=True)(x)
            assert torch.isfinite(got).all(), (call, dtype)
            zero = catalog.get(call.split("(")[1].split(",")[0]).derivative.xreplace({U: 0})
            assert float(got[0]) == pytest.approx(float(zero), rel=1e-6)


def test_clip_corners_take_the_mean_of_one_sided_slopes(catalog):
    c = catalog.get("linearclip")
    d = evaluate(c, np.array([-1.0, 1.0, 0.5, 2.0]), derivative=True)
    np.testing.assert_allclose(d, [0.5, 0.5, 1.0, 0.0])


def test_user_formulas_with_kinks(catalog):
    c = parse("abs(u)")  # a true corner: the mean of -1 and 1
    assert float(c.derivative.xreplace({U: 0})) == 0.0
    c = parse("sign(u)*sqrt(abs(u))")  # infinite slope: the secant
    assert float(c.derivative.xreplace({U: 0})) == pytest.approx(np.sqrt(1e-3) / 1e-3)
    c = parse("sign(u)*(1-exp(-abs(u)))*2 + 0*u")
    assert float(c.derivative.xreplace({U: 0})) == 2.0
    c = parse("sqrt(abs(sin(u)))")  # kinks at k*pi: u=0 exactly gets the secant, no NaN
    x = torch.tensor([0.0, np.pi, -np.pi], dtype=torch.float64)
    assert torch.isfinite(c.torch_fn(derivative=True)(x)).all()


def test_irrational_kinks_of_linear_arguments(catalog):
    """u - pi is exactly 0 at u = float(pi) in a kernel too: no NaN and the true/secant slope."""
    c = parse("sign(u-pi)*sqrt(abs(u-pi))")
    assert c.kinks == (pytest.approx(np.pi),)
    for dtype in (torch.float32, torch.float64):
        got = c.torch_fn(derivative=True)(torch.tensor([np.pi, 3.0], dtype=dtype))
        assert torch.isfinite(got).all()
        assert float(got[0]) == pytest.approx(np.sqrt(1e-3) / 1e-3, rel=1e-5)
    c = parse("sign(u-pi/2)*(1-exp(-abs(u-pi/2)))")
    got = c.torch_fn(derivative=True)(torch.tensor([np.pi / 2], dtype=torch.float64))
    assert float(got[0]) == pytest.approx(1.0)
    # a polynomial part inside a function: tanh(u - 0.3) is exactly 0 at u = float(0.3)
    c = parse("sign(sin(u-0.7))*(1-exp(-abs(sin(u-0.7))))")
    assert c.kinks == (0.7,)
    for dtype in (torch.float32, torch.float64):
        got = c.torch_fn(derivative=True)(torch.tensor([0.7], dtype=dtype))
        assert float(got[0]) == pytest.approx(1.0)
    c = parse("sqrt(abs(tanh(u-0.3)))")  # a cusp: the secant is 0 by symmetry, and finite
    got = c.torch_fn(derivative=True)(torch.tensor([0.3], dtype=torch.float32))
    assert torch.isfinite(got).all() and float(got[0]) == pytest.approx(0.0, abs=1e-6)
