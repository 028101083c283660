"""The exact, kernel-safe derivative of a candidate.

``sympy.diff`` is exact away from kinks, but for the sign-based forms of the catalog it is wrong or
undefined exactly *at* the kink: d/du [sign(u) * g(|u|)] comes out as
``2*g(|u|)*DiracDelta(u) + sign(u)**2 * g'(|u|)``, which a kernel evaluates to 0 at u = 0 (true
slope g'(0), e.g. 1 for expsign) or to 0*inf = NaN when g'(0) is infinite (exproot, power23).

Convention (stated once, used everywhere):

1. DiracDelta terms are dropped (they only live on a measure-zero set that step 3 handles).
2. Heaviside(x) becomes (1 + sign(x))/2, i.e. 1/2 at x = 0. That is the derivative convention of
   Min/Max (clip): at a clip corner the derivative is the mean of the two one-sided slopes.
3. At every *kink point* c (an exact real root of an argument of a kinked primitive such as Abs
   and sign, of Heaviside, or of the base of a non-integer power: rational, or an exact constant
   like pi or sqrt(2); u = 0 is always tried) the derivative's value is:
   - the mean of the one-sided limits of f' when both are finite (the true slope where f is
     differentiable: expsign, logsignclip and saturlog get slope 1 at 0);
   - otherwise (an infinite slope: exproot, power23clip at 0) the central secant slope
     (f(c + h) - f(c - h)) / (2h) with h = 1e-3: finite, of the right sign, and close to the
     slope a float32 finite difference would see.
   The value is attached as ``Piecewise((value, Eq(u, c)), ..., (f', True))``, only where the
   plain derivative would be wrong or non-finite at c.
"""

from __future__ import annotations

import sympy

from normfree.search_space._numeric import evaluate_point
from normfree.search_space._parser import U
from normfree.search_space.primitives import heads

SECANT_H = sympy.Rational(1, 1000)  # the h of the central secant at infinite-slope kinks
_EPS = (sympy.Rational(1, 10**12), sympy.Rational(1, 10**24))
_PREC = 40
_MAX_POLY_DEGREE = 6


def _point_value(expr: sympy.Expr, at: sympy.Expr) -> float | None:
    """``expr`` at ``u = at`` (40 digits, guarded mpmath), or None when undefined/infinite."""
    return evaluate_point(expr, at, dps=_PREC)


def kink_arguments(expr: sympy.Expr) -> list[sympy.Expr]:
    """Arguments whose zeros are potential kinks: of the kinked primitives (Abs, sign),
    Heaviside, and non-integer powers."""
    args: list[sympy.Expr] = []
    kinked = (*heads(lambda p: p.kink), sympy.Heaviside)
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, kinked) and node.args[0].free_symbols:
            args.append(node.args[0])
        elif isinstance(node, sympy.Pow) and node.base.free_symbols and not node.exp.is_Integer:
            args.append(node.base)
    return args


def degree_bound(g: sympy.Expr) -> int:
    """An upper bound of the degree of ``g`` in u, read off the tree without expanding it."""
    if g is U:
        return 1
    if not g.free_symbols:
        return 0
    if isinstance(g, sympy.Add):
        return max(degree_bound(a) for a in g.args)
    if isinstance(g, sympy.Mul):
        return sum(degree_bound(a) for a in g.args)
    if isinstance(g, sympy.Pow) and g.exp.is_Integer and g.exp >= 0:
        return degree_bound(g.base) * int(g.exp)
    return 10**9  # not a polynomial


def poly_real_roots(g: sympy.Expr, max_degree: int = _MAX_POLY_DEGREE) -> list[sympy.Expr]:
    """Exact real roots of ``g`` when it is a polynomial in u of bounded degree, else [].

    The degree is bounded *before* sympy builds a Poly, which would expand the expression:
    ((u+1)**32 + 1)**32 must not be expanded to degree 1024.
    """
    try:
        if degree_bound(g) > max_degree or not g.is_polynomial(U):
            return []
        poly = sympy.Poly(g, U)
        degree = poly.degree()
        if degree == 1:
            a, b = poly.all_coeffs()
            return [-b / a]
        if not 2 <= degree <= max_degree or not (poly.domain.is_ZZ or poly.domain.is_QQ):
            return []
        return list(poly.real_roots())
    except (sympy.PolynomialError, NotImplementedError, ValueError, TypeError):
        return []


_MAX_KINKS = 16


def _exact_real(r: sympy.Expr) -> bool:
    """A real constant we can compare u with and evaluate (1/3, pi/2, sqrt(2); no RootOf)."""
    if r.is_Rational:
        return True
    if r.free_symbols or r.has(sympy.CRootOf, sympy.I) or not r.is_real:
        return False
    return evaluate_point(r, sympy.S.Zero) is not None


def kink_points(expr: sympy.Expr) -> list[sympy.Expr]:
    """Exact real points where a kink argument of ``expr`` vanishes (bounded work).

    Rational roots (u - 1/3), exact irrational roots of polynomial arguments (u - pi, u**2 - 2),
    roots of polynomial parts that zero the argument (tanh(u - 0.3) at 0.3), and u = 0 whenever
    an argument is exactly 0 there. A float kernel evaluates u - c to exactly 0 at u = float(c),
    so these are the points where 0 * inf or a lost slope can occur.
    """
    points: dict[float, sympy.Expr] = {}
    for g in kink_arguments(expr):
        # Candidates: u = 0, and the exact roots of g's polynomial parts (g itself, or the
        # u - 0.3 inside tanh(u - 0.3)); kept where g is then exactly 0 (guarded mpmath).
        inner = [s for s in sympy.preorder_traversal(g) if isinstance(s, sympy.Add)][:8]
        candidates: list[sympy.Expr] = [sympy.S.Zero]
        for part in (g, *inner):
            candidates += [r for r in poly_real_roots(part) if _exact_real(r)]
        for c in candidates[: 4 * _MAX_KINKS]:
            if evaluate_point(g, c) == 0.0:
                points.setdefault(float(evaluate_point(c, sympy.S.Zero) or 0.0), c)
        if len(points) >= _MAX_KINKS:
            break
    return [points[k] for k in sorted(points)][:_MAX_KINKS]


def _kink_value(f: sympy.Expr, d: sympy.Expr, c: sympy.Rational) -> sympy.Expr:
    """The conventional derivative value at kink ``c`` (see the module docstring)."""
    sides = []
    for direction in (-1, 1):
        near, nearer = (_point_value(d, c + direction * e) for e in _EPS)
        if near is None or nearer is None or abs(near - nearer) > 1e-6 * (1 + abs(nearer)):
            sides.append(None)
        else:
            sides.append(nearer)
    if sides[0] is not None and sides[1] is not None:
        value = (sides[0] + sides[1]) / 2
    else:
        hi = _point_value(f, c + SECANT_H)
        lo = _point_value(f, c - SECANT_H)
        value = 0.0 if hi is None or lo is None else (hi - lo) / float(2 * SECANT_H)
    nearest = round(value)
    if abs(value - nearest) < 1e-12:
        return sympy.Integer(nearest)
    return sympy.Float(value, 17)


def kernel_safe_derivative(expr: sympy.Expr) -> sympy.Expr:
    """d expr / du with no DiracDelta/Heaviside, and the conventional value at kink points."""
    raw = sympy.diff(expr, U)
    kinks = {float(c): c for c in [*kink_points(expr), *kink_points(raw)]}
    kinks = [kinks[k] for k in sorted(kinks)]
    d = raw.replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
    d = d.replace(sympy.Heaviside, lambda x, *rest: (1 + sympy.sign(x)) / 2)
    fixes = []
    for c in kinks:
        value = _kink_value(expr, d, c)
        naive = _point_value(d, c)
        if naive is not None and abs(naive - float(value)) <= 1e-12 * (1 + abs(naive)):
            continue
        fixes.append((value, sympy.Eq(U, c)))
    if fixes:
        d = sympy.Piecewise(*fixes, (d, True))
    return d
