"""The expression language: grammar, rewrites into the kernel node set, limits, rejections."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from normfree.search_space import (
    MAX_DEPTH,
    MAX_LENGTH,
    MAX_NODES,
    Candidate,
    ExpressionError,
    U,
    evaluate,
    parse,
)
from normfree.search_space._numeric import disallowed_nodes
from normfree.search_space._parser import parse_expr_text
from normfree.search_space._syntax import tokenize

X = np.linspace(-4, 4, 81)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("u", U),
        ("x", U),
        ("-u**2", -(U**2)),
        ("2^3*u", 8 * U),
        ("2**-1*u", U / 2),
        ("(u)", U),
        ("1e-3*u", U / 1000),
        ("1.5E+2*u", 150 * U),
        (".5*u", U / 2),
        ("pi*u", sympy.pi * U),
        ("e*u", sympy.E * U),
        ("e**u", sympy.exp(U)),
        ("2**u", sympy.exp(U * sympy.log(2))),
        ("u - -u", 2 * U),
        ("arctan(u)", sympy.atan(U)),
        ("arcsinh(u)", sympy.asinh(U)),
        ("abs(u)", sympy.Abs(U)),
        ("sign(u)", sympy.sign(U)),
        ("clip(u)", sympy.Min(sympy.Max(U, -1), 1)),
        ("clip(u, -2, 3)", sympy.Min(sympy.Max(U, -2), 3)),
        ("min(u, 1, 2*u)", sympy.Min(U, 1, 2 * U)),
        ("max(u, 0)", sympy.Max(U, 0)),
        ("expm1(u)", sympy.exp(U) - 1),
        ("log1p(abs(u))", sympy.log(1 + sympy.Abs(U))),
        ("softsign(u)", U / (1 + sympy.Abs(U))),
    ],
)
def test_grammar_builds_sympy(text, expected):
    assert sympy.simplify(parse_expr_text(text) - expected) == 0


@pytest.mark.parametrize(
    ("text", "reference"),
    [
        ("sigmoid(u)", lambda u: 1 / (1 + np.exp(-u))),
        ("2*sigmoid(2*u) - 1", np.tanh),
        ("softsign(3*u)", lambda u: 3 * u / (1 + np.abs(3 * u))),
        ("clamp(u, -pi/2, pi/2)", lambda u: np.clip(u, -np.pi / 2, np.pi / 2)),
        ("expm1(-abs(u))", lambda u: np.expm1(-np.abs(u))),
        ("log1p(u^2)", lambda u: np.log1p(u**2)),
        ("cbrt(u)", np.cbrt),
        ("relu(u)", lambda u: np.maximum(u, 0)),
        ("silu(u)", lambda u: u / (1 + np.exp(-u))),
        ("erfc(u) + cosh(u/4) - sinh(u/5) + cos(u)", None),
        ("2 - 3*u/4 + u^3/7", lambda u: 2 - 3 * u / 4 + u**3 / 7),
        ("-u^2", lambda u: -(u**2)),
        ("2^-u^2", lambda u: 2.0 ** -(u**2)),
    ],
)
def test_rewrites_are_numerically_right_and_kernel_safe(text, reference):
    c = parse(text)
    assert isinstance(c, Candidate)
    assert not disallowed_nodes(c.expr)
    assert not disallowed_nodes(c.derivative)
    if reference is not None:
        np.testing.assert_allclose(evaluate(c, X), reference(X), rtol=1e-12, atol=1e-14)


def test_parse_keeps_formula_and_name():
    c = parse("  u/(1+abs(u)) ", name="mine")
    assert c.name == "mine" and c.formula == "u/(1+abs(u))"
    assert c.lineage.base == "mine" and c.lineage.formula == "u/(1+abs(u))"
    assert parse("tanh(u)").name == "tanh(u)"


@pytest.mark.parametrize(
    ("text", "fragment", "position"),
    [
        ("__import__('os')", "string", 11),
        ("__import__", "unknown name", 0),
        ("u.real", "attribute access", 1),
        ("(u).__class__", "attribute access", 3),
        ("lambda u: u", "unexpected character ':'", 8),
        ("lambda", "unknown name 'lambda'", 0),
        ("[u for u in range(3)]", "comprehensions", 0),
        ("{u: 1}", "comprehensions", 0),
        ("f'{u}'", "strings", 1),
        ('f"u"', "strings", 1),
        ("os.system('ls')", "attribute access", 2),
        ("eval(u)", "unknown function 'eval'", 0),
        ("exec(u)", "unknown function 'exec'", 0),
        ("open(u)", "unknown function 'open'", 0),
        ("y + u", "unknown name 'y'", 0),
        ("tanh", "must be called", 0),
        ("u == 1", "comparisons", 2),
        ("u; 1", "unexpected character ';'", 1),
        ("2u", "'*' to multiply", 1),
        ("", "empty", 0),
        ("u +", "unexpected end", 3),
        ("(u", "expected ')'", 2),
        ("u)", "unexpected ')'", 1),
        ("tanh(u, u)", "at most 1", 6),
        ("min(u)", "at least 2", 0),
        ("clip(u, 1)", "1 argument", 0),
        ("clip(u, 2, 1)", "lo < hi", 0),
        ("clip(u, u, 1)", "constants", 0),
        ("1e300*u", "too large", 0),
        ("1000001*u", "too large", 0),
        ("1000*1001*u", "too large", 4),
        ("exp(100)*u", "too large", 0),
        ("u**100", "exponent too large", 1),
        ("u**33", "exponent too large", 1),
        ("u**u", "exponent must be a constant", 1),
        ("(-2)**u", "exponent must be a constant", 4),
        ("u/0", "division by zero", 1),
        ("u/(1-1)", "division by zero", 1),
        ("log(0)*u", "undefined", 0),
        ("sqrt(-1)*u", "undefined", 0),
        ("(-8)**(1/3)*u", "not real", 4),
        ("u\x00", "unexpected character", 1),
        ("ü", "unexpected character", 0),
        ("u²", "unexpected character", 1),
        ("١٢*u", "unexpected character", 0),
    ],
)
def test_rejections_are_positioned_expression_errors(text, fragment, position):
    with pytest.raises(ExpressionError) as info:
        parse(text)
    assert fragment in info.value.message
    assert info.value.position == position
    assert str(position) in str(info.value)


def test_limits():
    with pytest.raises(ExpressionError, match="too long"):
        parse("u+" * (MAX_LENGTH // 2) + "u")
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse("(" * (MAX_DEPTH + 1) + "u" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse("-" * 200 + "u")
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse("tanh(" * 50 + "u" + ")" * 50)
    with pytest.raises(ExpressionError, match="nodes"):
        parse("+".join(["u*u"] * (MAX_NODES // 2)))
    # just inside the limits is fine
    assert parse("(" * 20 + "u" + ")" * 20).expr == U
    assert parse("tanh(" * 10 + "u" + ")" * 10)


def test_tokenizer_positions():
    toks = tokenize("erf(2.5e-1*u) ^ 2")
    assert [(t.kind, t.text, t.pos) for t in toks] == [
        ("name", "erf", 0),
        ("op", "(", 3),
        ("num", "2.5e-1", 4),
        ("op", "*", 10),
        ("name", "u", 11),
        ("op", ")", 12),
        ("op", "^", 14),
        ("num", "2", 16),
        ("end", "", 17),
    ]


def test_error_to_dict():
    with pytest.raises(ExpressionError) as info:
        parse("u.x")
    assert info.value.to_dict() == {"error": "attribute access is not allowed", "position": 1}
