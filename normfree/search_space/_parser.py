"""Formula text -> sympy: the checked tree of :mod:`._syntax`, built with sympy constructors.

User text never reaches ``eval``/``exec``/``sympify``: :func:`._syntax.parse_tree` checks it
against the grammar and every limit first, and this module only builds sympy nodes from that
tree, adding the two checks that need sympy's exact arithmetic (a divisor that simplifies to
zero, an exact rational constant too large to keep). Functions outside the kernel node set
(sigmoid, softsign, clip, expm1, log1p, min, max, ...) are rewritten here into that set, so
nothing downstream ever sees them.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from normfree.search_space._syntax import ALIASES, FUNCTIONS, Tree, parse_tree
from normfree.search_space.errors import ExpressionError
from normfree.search_space.primitives import BY_NAME, PRIMITIVES

U = sympy.Symbol("u", real=True)

MAX_CONSTANT_BITS = 4096  # size of an exact rational constant (((1/3)**32)**32 ... explodes)

Builder = Callable[..., sympy.Expr]


def _clip(v: sympy.Expr, lo: sympy.Expr | None = None, hi: sympy.Expr | None = None):
    lo = sympy.S.NegativeOne if lo is None else lo
    hi = sympy.S.One if hi is None else hi
    return sympy.Min(sympy.Max(v, lo), hi)


def _sigmoid(v: sympy.Expr) -> sympy.Expr:
    # 1/(1+exp(-v)) == (1 + tanh(v/2))/2. The tanh form never overflows and makes
    # 2*sigmoid(2u) - 1 collapse to tanh(u) by sympy's automatic simplification.
    return (1 + sympy.tanh(v / 2)) / 2


_HALF = sympy.Rational(1, 2)

BUILDERS: dict[str, Builder] = {
    # the primitives, one sympy node each, and their aliases
    **{p.name: p.sympy for p in PRIMITIVES},
    **{alias: BY_NAME[name].sympy for alias, name in ALIASES.items()},
    # functions the language spells with the primitives
    "sigmoid": _sigmoid,
    "expm1": lambda v: sympy.exp(v) - 1,
    "log1p": lambda v: sympy.log(1 + v),
    "sqrt": lambda v: sympy.Pow(v, _HALF),
    # Real cube root (sympy's Pow(v, 1/3) is complex for v < 0).
    "cbrt": lambda v: sympy.sign(v) * sympy.Pow(sympy.Abs(v), sympy.Rational(1, 3)),
    "clip": _clip,
    "clamp": _clip,
    "min": sympy.Min,
    "max": sympy.Max,
    "softsign": lambda v: v / (1 + sympy.Abs(v)),
    "relu": lambda v: sympy.Max(v, 0),
    "silu": lambda v: v * _sigmoid(v),
    "gelu": lambda v: v * (1 + sympy.erf(v / sympy.sqrt(2))) / 2,
}
assert set(BUILDERS) == set(FUNCTIONS), "every function of the language builds sympy"

CONSTANTS: dict[str, sympy.Expr] = {"pi": sympy.pi, "e": sympy.E}


def _pow(t: Tree) -> sympy.Expr:
    base_t, exponent_t = t.args
    base, exponent = build(base_t), build(exponent_t)
    if exponent_t.value is None:  # c**g(u), c > 0 (checked): exp(g(u)*log(c)), kernel-safe
        if base == sympy.E:
            return sympy.exp(exponent)
        return sympy.exp(exponent * sympy.log(base))
    if (
        base_t.value is not None
        and isinstance(base, sympy.Rational)
        and isinstance(exponent, sympy.Integer)
    ):
        bits = abs(base.p).bit_length() + base.q.bit_length()
        if bits * abs(int(exponent)) > MAX_CONSTANT_BITS:
            raise ExpressionError("constant power needs too much precision to keep exactly", t.pos)
    if base == sympy.E:
        return sympy.exp(exponent)
    return sympy.Pow(base, exponent)


def build(t: Tree) -> sympy.Expr:
    """The sympy expression of a checked tree (in :data:`U`)."""
    if t.op == "num":
        frac = t.number  # exact rationals keep canonical forms exact (2.72 -> 68/25)
        return sympy.Rational(frac.numerator, frac.denominator)
    if t.op == "var":
        return U
    if t.op == "const":
        return CONSTANTS[t.text]
    if t.op == "call":
        return BUILDERS[t.text](*[build(a) for a in t.args])
    if t.op == "**":
        return _pow(t)
    if t.op == "neg":
        return -build(t.args[0])
    left, right = build(t.args[0]), build(t.args[1])
    if t.op == "+":
        return left + right
    if t.op == "-":
        return left - right
    if t.op == "*":
        return left * right
    if right.is_zero:  # "/": a divisor that is zero only once sympy simplifies it (u - u)
        raise ExpressionError("division by zero", t.pos)
    return left / right


def parse_expr_text(text: str) -> sympy.Expr:
    """Parse formula text into a sympy expression in :data:`U` (no domain checks yet)."""
    return build(parse_tree(text))
