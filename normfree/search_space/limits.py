"""f at +-infinity from sympy's limits, where they are cheap, with the growth label they imply.

The numeric reading of a function's tails (sup |f| per decade up to |u| = 1e16, in
:mod:`.properties`) is fooled by anything that happens beyond its grid or overflows on it: a
root past the grid, a NaN from inf - inf. An exact limit is not, so it decides whenever sympy can
take it on a small expression:

- ``lim f`` finite: bounded, with that limit; an ``AccumBounds`` (sin): bounded, no limit;
- ``lim f = +-oo``: unbounded, and ``q = lim log|f| / log|u|`` names the growth: 0 logarithmic,
  0 < q < 1 a sub-linear power q, 1 linear, q > 1 super-linear, oo exponential;
- a limit that is not real (``sqrt(150 - abs(u))`` tends to ``oo*I``) means f leaves the real line
  out there: the domain rule refuses it (:func:`check_real_at_infinity`).

Guarded like every other symbolic step: only expressions of at most :data:`MAX_LIMIT_NODES`
nodes, function calls nested at most :data:`MAX_LIMIT_NESTING` deep, and no min/max/piecewise
left once ``u = +-p`` (p > 0) is substituted (``abs`` and ``sign``
evaluate away there), and any failure of sympy means "unknown", never an error: the numeric
reading then stands.
"""

from __future__ import annotations

import math
from functools import lru_cache

import sympy

from normfree.search_space._numeric import node_count
from normfree.search_space._parser import U
from normfree.search_space.errors import ExpressionError
from normfree.search_space.primitives import heads

MAX_LIMIT_NODES = 40
_P = sympy.Symbol("p", positive=True)
_SIDES = {1: "+inf", -1: "-inf"}


# Nested function calls: sympy's limit algorithm (Gruntz) grows exponentially with the nesting
# of transcendental functions (tanh nested ten deep did not finish in 15 minutes, three deep took
# 2 s); deeper expressions keep the numeric reading.
MAX_LIMIT_NESTING = 2


def _nesting(e: sympy.Basic) -> int:
    """Depth of nested function applications (exp, tanh, erf, ...; powers do not count)."""
    inner = max((_nesting(a) for a in e.args), default=0)
    return inner + 1 if isinstance(e, sympy.Function) else inner


def _tail(expr: sympy.Expr, sign: int) -> sympy.Expr | None:
    e = expr.xreplace({U: sign * _P})
    if node_count(e) > MAX_LIMIT_NODES or e.has(sympy.Min, sympy.Max, sympy.Piecewise):
        return None
    if _nesting(e) > MAX_LIMIT_NESTING:
        return None
    if e.has(*heads(lambda p: p.kink)):  # abs, sign: only when they did not evaluate away
        return None
    return e


# The domain check and the properties both ask for lim f at each end (0.05-0.2 s of sympy
# each): a process computes each limit once.
@lru_cache(maxsize=256)
def _limit(e: sympy.Expr) -> sympy.Basic | None:
    try:
        return sympy.limit(e, _P, sympy.oo)
    except Exception:  # sympy gives up in many ways (NotImplementedError, ValueError, ...)
        return None


# A sum's limit from its terms' (each cached): lim (a + b) = lim a + lim b when each is a real
# number or +-oo and no +oo meets a -oo, and then lim (a + b)/p is the sum of the infinite
# terms' lim a/p (a finite term's a/p -> 0). Gruntz on each term is cheaper than on the sum,
# and the terms recur across formulas (tanh(u) + u/10: lim tanh(p) 0.04 s and lim (p/10)/p a
# constant, for 0.08 + 0.08 s by the whole). Anything else (an AccumBounds, a complex or failed
# term limit, +oo and -oo together) takes the limit of the whole, as before.
def _settled(lim: sympy.Basic | None) -> bool:
    """A real number or +-oo (not AccumBounds, nan, zoo, a complex infinity)."""
    if lim is None or isinstance(lim, sympy.AccumBounds):
        return False
    return lim in (sympy.oo, -sympy.oo) or (
        lim.is_number and lim.is_real is True and lim.is_finite is True
    )


def _sum_of(lims: list[sympy.Basic]) -> sympy.Basic | None:
    if not all(_settled(v) for v in lims) or (sympy.oo in lims and -sympy.oo in lims):
        return None
    return sympy.Add(*lims)


def _limit_of(e: sympy.Expr) -> sympy.Basic | None:
    """``lim e`` as p -> oo, termwise for a sum where that is exact, else by sympy."""
    if isinstance(e, sympy.Add):
        termwise = _sum_of([_limit(a) for a in e.args])
        if termwise is not None:
            return termwise
    return _limit(e)


def _ratio_limit(e: sympy.Expr) -> sympy.Basic | None:
    """``lim e/p`` as p -> oo, termwise for a sum whose terms settle, else by sympy."""
    if isinstance(e, sympy.Add):
        lims = [_limit(a) for a in e.args]
        if all(_settled(v) for v in lims):
            parts = [
                sympy.S.Zero if v.is_finite else _limit(a / _P)
                for a, v in zip(e.args, lims, strict=True)
            ]
            termwise = _sum_of(parts) if all(v is not None for v in parts) else None
            if termwise is not None:
                return termwise
    return _limit(e / _P)


# An odd f (f(-u) = -f(u) once sympy's automatic canonicalisation has run, the test the
# properties' symmetry uses) has at -oo the limits of its +oo side, negated: as p -> oo,
# f(-p) -> -L, f(-p)/p -> -r and log|f(-p)|/log p -> q. The -oo side of an odd function is
# then read off the +oo side instead of taking its limits by Gruntz again (0.04-0.08 s each:
# tanh(u) + u/10 0.26 -> 0.13 s). Only where both sides pass the guards above and the +oo side
# was found; otherwise each side is taken on its own.
@lru_cache(maxsize=256)
def _odd(expr: sympy.Expr) -> bool:
    try:
        return expr.xreplace({U: -U}) + expr == 0
    except (TypeError, ValueError):
        return False


def _mirrored(expr: sympy.Expr, sign: int) -> bool:
    """Whether the ``sign`` side is read off the +oo side (see :func:`_odd`)."""
    return sign == -1 and _odd(expr) and _tail(expr, -1) is not None


def limit_at_infinity(expr: sympy.Expr, sign: int) -> sympy.Basic | None:
    """``lim f(u)`` as ``u -> sign*oo`` by sympy; None when not attempted or not found."""
    if _mirrored(expr, sign):
        lim = _limit_at(expr, 1)
        if lim is not None:
            return -lim
    return _limit_at(expr, sign)


def _limit_at(expr: sympy.Expr, sign: int) -> sympy.Basic | None:
    e = _tail(expr, sign)
    return None if e is None else _limit_of(e)


def _real_number(v: sympy.Basic) -> float | None:
    try:
        x = complex(v)
    except (TypeError, ValueError):
        return None
    return x.real if x.imag == 0 and math.isfinite(x.real) else None


def side_from_limits(
    expr: sympy.Expr, sign: int
) -> tuple[bool, float | None, str, float | None] | None:
    """(bounded, limit, growth, exponent) towards ``sign*oo`` from limits, or None (unknown)."""
    if _mirrored(expr, sign):
        side = _side_at(expr, 1)
        if side is not None:
            bounded, value, growth, exponent = side
            return bounded, None if value is None else -value, growth, exponent
    return _side_at(expr, sign)


def _side_at(expr: sympy.Expr, sign: int) -> tuple[bool, float | None, str, float | None] | None:
    e = _tail(expr, sign)
    if e is None:
        return None
    lim = _limit_of(e)
    if lim is None:
        return None
    if isinstance(lim, sympy.AccumBounds):
        lo, hi = _real_number(lim.min), _real_number(lim.max)
        return (True, None, "bounded", None) if lo is not None and hi is not None else None
    value = _real_number(lim)
    if value is not None:
        return True, value, "bounded", None
    if lim not in (sympy.oo, -sympy.oo):
        return None
    # f ~ r*p with a finite r != 0 is linear: log|f| / log p -> 1. That limit costs a third of
    # the one below where f has a transcendental part (tanh(u) + u/10), and linear is common.
    r = _ratio_limit(e)
    if r is not None and _real_number(r) not in (None, 0.0):
        return False, None, "linear", 1.0
    q = _limit(sympy.log(sympy.Abs(e)) / sympy.log(_P))
    if q is None:
        return None
    if q == sympy.oo:
        return False, None, "exponential", None
    qv = _real_number(q)
    if qv is None or qv < 0:
        return None
    if qv == 0:
        return False, None, "logarithmic", None
    if qv < 1:
        return False, None, "sub-linear power", round(qv, 3)
    if qv == 1:
        return False, None, "linear", 1.0
    return False, None, "super-linear", round(qv, 3)


def check_real_at_infinity(expr: sympy.Expr) -> None:
    """Refuse f whose limit at +-infinity is not real (it left the real line out there)."""
    for sign in (1, -1):
        lim = limit_at_infinity(expr, sign)
        if lim is None or lim.is_extended_real or isinstance(lim, sympy.AccumBounds):
            continue
        if lim.has(sympy.I) or lim is sympy.nan:
            raise ExpressionError(
                f"the formula is not real as u -> {_SIDES[sign]} (its limit there is {lim}); "
                "formulas must be finite and real for every real u, e.g. use abs() inside "
                "sqrt and log"
            )


__all__ = ["check_real_at_infinity", "limit_at_infinity", "side_from_limits"]
