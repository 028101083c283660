"""An odd function's -oo side, read off its +oo side, is what the -oo limits themselves say."""

from __future__ import annotations

import pytest

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
