"""The domain rule: a formula that is NaN or infinite somewhere on the real line is rejected."""

from __future__ import annotations

import numpy as np
import pytest

from normfree.search_space import ExpressionError, evaluate, parse


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("log(u)", "log(u) is not finite"),
        ("log(u^2)", "not finite at u=0"),
        ("log(1+u)", "not finite"),
        ("log(sin(u)+1)", "not finite"),
        ("log(sin(u))", "not finite"),
        ("1/u", "division by zero"),
        ("u**-1", "division by zero"),
        ("u**-2", "division by zero"),
        ("1/(u-0.3)**2", "division by zero"),
        ("1/(u^2-2)", "division by zero"),
        ("1/(u - pi)", "division by zero"),
        ("1/tanh(u)", "division by zero"),
        ("1/(sin(u)+1)", "division by zero"),
        ("1/(abs(u-0.123456789))", "division by zero"),
        ("sqrt(u)", "not real"),
        ("u**0.5", "not real"),
        ("(u-1)**(1/3)", "not real"),
        ("sqrt(cos(u))", "not real"),
        ("exp(exp(u))", "not finite"),
        ("cosh(u)^32", "not finite"),
    ],
)
def test_rejected_with_reason_and_hint(text, fragment):
    with pytest.raises(ExpressionError) as info:
        parse(text)
    assert fragment in info.value.message
    assert "log(abs(u)+1)" in info.value.message  # the hint


@pytest.mark.parametrize(
    "text",
    [
        "log(abs(u)+1)",
        "sqrt(abs(u))",
        "1/(1+abs(u))",
        "1/(u^2+1)",
        "1/(2+sin(u))",
        "log(u^2+1e-6)",
        "exp(u)",  # finite everywhere; overflows only beyond |u| ~ 709 (documented)
        "sinh(u)",
        "(u^2+1)^(1/3)",
        "abs(u)^0.25",
    ],
)
def test_guarded_forms_are_accepted(text):
    c = parse(text)
    assert np.all(np.isfinite(evaluate(c, np.linspace(-50, 50, 1001))))
    assert np.all(np.isfinite(evaluate(c, np.linspace(-50, 50, 1001), derivative=True)))
