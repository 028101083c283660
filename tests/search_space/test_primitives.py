"""The primitives table: every backend's column computes the same function, and every table
that used to be written by hand (parser, node set, grammar, printers) is derived from it."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy
import torch

from normfree.kernels._printers import CPrinter, TorchPrinter, TritonPrinter
from normfree.search_space import _numeric, _parser, _syntax, grammar
from normfree.search_space.primitives import PRIMITIVES, resolve_numeric, resolve_torch

POINTS = [-2.5, -0.7, 0.3, 1.9]


@pytest.mark.parametrize("prim", PRIMITIVES, ids=lambda p: p.name)
def test_every_backend_computes_the_same_function(prim: object) -> None:
    pts = [abs(x) + 0.1 for x in POINTS] if prim.name == "log" else POINTS
    want = [float(prim.sympy(sympy.Float(x)).evalf(30)) for x in pts]
    assert [prim.math(x) for x in pts] == pytest.approx(want, rel=1e-12, abs=1e-15)
    got_np = resolve_numeric(prim.numpy)(np.array(pts))
    assert list(got_np) == pytest.approx(want, rel=1e-12, abs=1e-15)
    got_t = resolve_torch(prim.torch)(torch.tensor(pts, dtype=torch.float64))
    assert got_t.tolist() == pytest.approx(want, rel=1e-12, abs=1e-15)
    x = sympy.Symbol("x")
    for p in pts:
        value = _numeric.evaluate_point(prim.sympy(x).subs(x, sympy.Float(p)), 0.0)
        assert float(value) == pytest.approx(want[pts.index(p)], rel=1e-12, abs=1e-15)
    assert mpmath.mp.dps >= 15


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
