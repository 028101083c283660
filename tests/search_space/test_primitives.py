"""The primitives table: every backend's column computes the same function, every table that
reads it (parser, node set, grammar, printers) is derived from it, and every row's example
formula passes the checks a user's formula passes."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy
import torch

from normfree.kernels._printers import CPrinter, TorchPrinter, TritonPrinter
from normfree.search_space import U, _numeric, _parser, _syntax, grammar, parse
from normfree.search_space.primitives import PRIMITIVES, Code, ordered, python_function

POINTS = [-2.5, -0.7, 0.3, 1.9]


def _points(prim) -> list[float]:
    return [abs(x) + 0.1 for x in POINTS] if prim.domain == "positive" else POINTS


@pytest.mark.parametrize("prim", PRIMITIVES, ids=lambda p: p.name)
def test_every_backend_computes_the_same_function(prim) -> None:

    pts = _points(prim)
    want = [float(prim.sympy(sympy.Float(x)).evalf(30)) for x in pts]
    close = {"rel": 1e-12, "abs": 1e-15}
    assert [prim.math(x) for x in pts] == pytest.approx(want, **close)
    assert list(python_function(prim.numpy, "numpy")(np.array(pts))) == pytest.approx(want, **close)
    got_t = python_function(prim.torch, "torch")(torch.tensor(pts, dtype=torch.float64))
    assert got_t.tolist() == pytest.approx(want, **close)
    x = sympy.Symbol("x")
    for p, w in zip(pts, want, strict=True):
        value = _numeric.evaluate_point(prim.sympy(x).subs(x, sympy.Float(p)), 0.0)
        assert float(value) == pytest.approx(w, **close)
    if prim.tails is not None and math.isfinite(prim.tails.pos):  # the tails are the limits
        far = prim.tails.beyond * 1.5
        with mpmath.workdps(30):
            fn = python_function(prim.mpmath, "mpmath")
            assert float(fn(mpmath.mpf(far))) == pytest.approx(prim.tails.pos, abs=1e-12)
            assert float(fn(mpmath.mpf(-far))) == pytest.approx(prim.tails.neg, abs=1e-12)


@pytest.mark.parametrize("prim", PRIMITIVES, ids=lambda p: p.name)
def test_derivative_matches_the_columns(prim) -> None:
    """sympy's (or the row's) derivative against a central difference of the mpmath column."""
    d = sympy.diff(prim.sympy(U), U)
    fn = python_function(prim.mpmath, "mpmath")
    for p in _points(prim):
        with mpmath.workdps(40):
            h = mpmath.mpf(10) ** -15
            slope = (fn(mpmath.mpf(p) + h) - fn(mpmath.mpf(p) - h)) / (2 * h)
        assert float(d.subs(U, sympy.Float(p, 30)).evalf(30)) == pytest.approx(float(slope))


@pytest.mark.parametrize("prim", PRIMITIVES, ids=lambda p: p.name)
def test_example_formula_is_a_valid_candidate(prim) -> None:
    cand = parse(prim.formula)
    assert prim.sympy in {type(n) for n in sympy.preorder_traversal(cand.expr)}
    assert cand.properties.summary()
    assert _numeric.disallowed_nodes(cand.derivative) == []


def test_the_tables_are_derived_from_it() -> None:
    heads = {p.sympy for p in PRIMITIVES}
    assert set(_numeric.ALLOWED_FUNCS) == heads | {sympy.Min, sympy.Max}
    for printer in (TorchPrinter, TritonPrinter, CPrinter):
        assert set(printer.functions) == heads
    for p in PRIMITIVES:
        assert _parser.BUILDERS[p.name] is p.sympy
        assert grammar._NAMES[p.sympy] == p.name
        assert _syntax.FOLD[p.name](0.5) == p.math(0.5)
    assert math.isclose(_syntax.FOLD["arctan"](1.0), math.atan(1.0))
    proposed = [p.name for p in PRIMITIVES if p.propose > 0]
    assert [g.name for g in grammar.UNARY[: len(proposed)]] == proposed


def test_helpers_come_after_the_helpers_they_call() -> None:
    a = Code("a", "a")
    b = Code("b", "b", (a,))
    c = Code("c", "c", (b, a))
    assert [x.name for x in ordered([c, b])] == ["a", "b", "c"]
    assert [x.name for x in ordered([a, c, a])] == ["a", "b", "c"]
