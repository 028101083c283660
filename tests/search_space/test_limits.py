"""The cheaper routes to limits at infinity say what sympy's limits themselves say: an odd
function's -oo side read off its +oo side, and a sum's limit taken termwise."""

from __future__ import annotations

import pytest
import sympy

from normfree.search_space import limits, parse

ODD = [
    "tanh(u) + 0.1*u",
    "atan(3*u) - u/7",
    "erf(u)",
    "asinh(u)",
    "u**3 + u",
    "sign(u)*log(1 + abs(u))",
    "u/(1 + abs(u))",
    "sin(u) + u",
    "sinh(u)",
    "u*exp(-u**2)",
    "cbrt(u)",
    "sign(u)*abs(u)**(2/3)",
]


@pytest.mark.parametrize("formula", ODD)
def test_the_mirrored_side_is_the_computed_side(formula: str) -> None:
    expr = parse(formula).expr
    assert limits._odd(expr) and limits._mirrored(expr, -1)
    assert limits.side_from_limits(expr, -1) == limits._side_at(expr, -1)
    assert limits.limit_at_infinity(expr, -1) == limits._limit_at(expr, -1)


def test_an_even_or_asymmetric_function_is_not_mirrored() -> None:
    for formula in ("exp(-u**2)", "tanh(u) + 1", "u**2 + u"):
        assert not limits._mirrored(parse(formula).expr, -1)


SUMS = [
    "tanh(u) + 0.1*u",
    "atan(3*u) - u/7",
    "atan(u) + tanh(u)",
    "erf(u) + 0.5",
    "u**3 - u**2 + tanh(u)",
    "asinh(u) + u/2",
    "exp(-u**2) + 2*u",
    "sign(u)*log(1 + abs(u)) + erf(u)",
]


@pytest.mark.parametrize("formula", SUMS)
def test_a_sum_taken_termwise_is_what_sympy_takes_whole(formula: str) -> None:
    expr = parse(formula).expr
    for sign in (1, -1):
        e = limits._tail(expr, sign)
        assert isinstance(e, sympy.Add)
        assert limits._limit_of(e) == limits._limit(e)
        assert limits._ratio_limit(e) == limits._limit(e / limits._P)


def test_terms_that_do_not_settle_leave_the_sum_to_sympy() -> None:
    p = limits._P
    assert limits._sum_of([sympy.oo, -sympy.oo]) is None
    assert limits._sum_of([sympy.AccumBounds(-1, 1), sympy.oo]) is None
    assert limits._sum_of([sympy.oo * sympy.I, sympy.Integer(1)]) is None
    assert limits._limit_of(p**2 + sympy.sin(p)) == sympy.oo  # by sympy, whole
