"""The domain rule: a candidate must be finite for every real u, and so must its derivative.

normfree REJECTS a formula that is NaN or infinite anywhere on the real line (log(u), sqrt(u), 1/u,
u**-1, log(sin(u)) ...) instead of guarding it silently: a silent guard would change the function
the user asked about. The error names the offending sub-expression and a point where it fails, and
suggests a guarded form (log(abs(u)+1), sqrt(abs(u)), 1/(1+abs(u))).

The check is layered so that it is both cheap and hard to fool:

1. symbolic: exact real roots of polynomial denominators and log arguments (sympy ``real_roots``,
   bounded degree), and sign of non-integer power bases;
2. numeric, float64: f and f' on a dense grid over [-100, 100] that contains 0, the integers and the
   exact kink points, plus tiny and moderately large |u|; near-zeros of every denominator are
   refined by bounded minimisation so that 1/(u - 0.3)**2 is caught between grid points;
3. numeric, float32 (numpy, IEEE as the kernels) on [-10, 10]: what a kernel will actually compute;
4. the rest of the real line: every denominator, log argument and fractional-power base on a
   log-spaced grid of |u| from 100 to 1e300, where a sign change is a root (refined by brentq and
   refused: ``1/(exp(u-150)-1)``) and a negative value a non-real power or log
   (``sqrt(150-abs(u))``); and f's limits at +-infinity by sympy (:mod:`.limits`), which must be
   real. Only strictly negative values and sign changes count there: a value that underflows to
   0 (``log(exp(-u)+...)`` far out) is rounding, not a root.

Functions that are finite everywhere but overflow only for large |u| (exp(u), cosh(u) beyond
|u| ~ 709 in float64) are accepted; their growth is reported by the properties.
"""

from __future__ import annotations

import numpy as np
import sympy

from normfree.search_space._derivative import poly_real_roots
from normfree.search_space._numeric import evaluate_array, evaluate_numpy
from normfree.search_space.errors import ExpressionError
from normfree.search_space.limits import check_real_at_infinity
from normfree.search_space.primitives import heads

HINT = (
    "formulas must be finite for every real u; guard the argument yourself, e.g. "
    "log(abs(u)+1), sqrt(abs(u)), 1/(1+abs(u))"
)

_MAX_POLY_DEGREE = 8
_MAX_MINIMA = 8  # local minima of |g| refined per sub-expression
_MAX_GUARDED = 24  # distinct denominators/log arguments/power bases examined closely
DOMAIN_RADIUS = 100.0


def domain_grid(extra: list[float] | None = None) -> np.ndarray:
    """The float64 points where f and f' must be finite."""
    dense = np.linspace(-DOMAIN_RADIUS, DOMAIN_RADIUS, 40001)  # step 0.005, contains 0
    special = [0.0, 1e-300, 1e-30, 1e-12, 1e-6, 0.1, 0.5, np.pi / 2, np.e]
    pts = np.concatenate([dense, special, [-s for s in special], np.arange(-100.0, 101.0)])
    if extra:
        pts = np.concatenate([pts, np.asarray(extra, dtype=np.float64)])
    return np.unique(pts)


# |u| beyond the dense grid: 100 points per decade up to 1e20, then 2 per decade to 1e300.
_FAR_POS = np.unique(np.concatenate([np.logspace(2, 20, 1801), np.logspace(20, 300, 561)]))
FAR_GRID = np.concatenate([-_FAR_POS[::-1], _FAR_POS])


def _far_sign_change(g: sympy.Expr) -> float | None:
    """A root of ``g`` beyond |u| = 100: a sign change between neighbouring far points."""
    for side in (_FAR_POS, -_FAR_POS):
        with np.errstate(all="ignore"):
            vals = evaluate_numpy(g, side)
        ok = np.isfinite(vals) & (vals != 0)
        idx = np.where(ok[:-1] & ok[1:] & (np.sign(vals[:-1]) != np.sign(vals[1:])))[0]
        if idx.size:
            a, b = float(side[idx[0]]), float(side[idx[0] + 1])
            import scipy.optimize  # here: few formulas get this far, and it costs a CLI 0.3 s

            try:
                return float(
                    scipy.optimize.brentq(
                        lambda t: float(evaluate_numpy(g, np.array([t]))[0]), a, b, maxiter=200
                    )
                )
            except (ValueError, RuntimeError):
                return a
    return None


def _far_negative(g: sympy.Expr) -> float | None:
    """A point beyond |u| = 100 where ``g`` is strictly negative (or crosses zero)."""
    with np.errstate(all="ignore"):
        vals = evaluate_numpy(g, FAR_GRID)
    bad = np.where(vals < 0)[0]
    if bad.size:
        return float(FAR_GRID[bad[np.argmin(np.abs(FAR_GRID[bad]))]])  # the nearest to 0
    return _far_sign_change(g)


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def _poly_real_roots(g: sympy.Expr) -> list[float]:
    out = []
    for r in poly_real_roots(g, _MAX_POLY_DEGREE):
        try:
            out.append(float(r))
        except TypeError:  # a complex root of a linear polynomial with complex coefficients
            continue
    return out


def _away_from_zero(g: sympy.Expr, threshold: float) -> bool:
    """True when sympy proves |g| >= 1000 * threshold for every real u (1 + abs(u), u**2 + 1).

    Then no refinement of a minimum of |g| can reach ``threshold``, and :func:`_near_zero` need
    not run its minimiser (whose scipy import alone costs a CLI check 0.3 s). The margin keeps
    float rounding of g's values from mattering; an unproven bound (None) proves nothing.
    """
    bound = sympy.Rational(1000 * threshold)
    return bool((g - bound).is_nonnegative or (-g - bound).is_nonnegative)


def _near_zero(g: sympy.Expr, grid: np.ndarray) -> float | None:
    """A point where |g| (numerically) reaches 0, refining local minima of |g| on ``grid``."""
    vals = np.abs(evaluate_numpy(g, grid))
    if not np.all(np.isfinite(vals)):
        return float(grid[np.argmax(~np.isfinite(vals))])
    if np.any(vals == 0):
        return float(grid[np.argmax(vals == 0)])
    # Indices of local minima of |g| (including sign changes, where |g| dips between points).
    interior = np.where((vals[1:-1] <= vals[:-2]) & (vals[1:-1] <= vals[2:]))[0] + 1
    candidates = interior[np.argsort(vals[interior])][:_MAX_MINIMA]
    if candidates.size and _away_from_zero(g, 1e-11 * max(1.0, float(np.max(vals[candidates])))):
        return None
    for i in candidates:
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        import scipy.optimize  # here: most formulas never reach it, and it costs a CLI 0.3 s

        res = scipy.optimize.minimize_scalar(
            lambda t: float(np.abs(evaluate_numpy(g, np.array([t]))[0])),
            bounds=(lo, hi),
            method="bounded",
            options={"xatol": 1e-13, "maxiter": 200},
        )
        # Treated as a zero: within 1e-11 (relative to the neighbours' size, at least 1).
        if res.fun <= 1e-11 * max(1.0, float(vals[i])):
            return float(res.x)
    return None


def check_domain(expr: sympy.Expr, derivative: sympy.Expr, kinks: list[float]) -> None:
    """Raise :class:`ExpressionError` unless f and f' are finite on the whole real line."""
    grid = domain_grid(kinks)
    # the primitives finite only for positive arguments (log), from the primitives table
    positive = heads(lambda p: p.domain == "positive")
    # 1 + 2a: the dangerous sub-expressions, symbolically and by refined search.
    seen: set[sympy.Basic] = set()
    for node in sympy.preorder_traversal(expr):
        if node in seen or not isinstance(node, (sympy.Pow, *positive)):
            continue
        seen.add(node)
        if len(seen) > _MAX_GUARDED:
            break  # bounded work; the dense-grid check below still covers the rest
        if isinstance(node, sympy.Pow) and node.base.free_symbols:
            if node.exp.is_negative:
                for r in _poly_real_roots(node.base):
                    raise ExpressionError(
                        f"division by zero: {node} is infinite at u={_fmt(r)}; {HINT}"
                    )
                at = _near_zero(node.base, grid)
                if at is not None:
                    raise ExpressionError(
                        f"division by zero: {node} is infinite near u={_fmt(at)}; {HINT}"
                    )
                at = _far_sign_change(node.base)
                if at is not None:
                    raise ExpressionError(
                        f"division by zero: {node} is infinite near u={_fmt(at)}; {HINT}"
                    )
            if not node.exp.is_Integer:
                vals = evaluate_numpy(node.base, grid)
                bad = np.where(vals < 0)[0]
                if bad.size:
                    raise ExpressionError(
                        f"{node} is not real at u={_fmt(grid[bad[0]])} (negative base of a "
                        f"fractional power); {HINT}"
                    )
                at = _far_negative(node.base)
                if at is not None:
                    raise ExpressionError(
                        f"{node} is not real near u={_fmt(at)} (negative base of a "
                        f"fractional power); {HINT}"
                    )
        if isinstance(node, positive):
            arg = node.args[0]
            for r in _poly_real_roots(arg):
                raise ExpressionError(f"{node} is not finite at u={_fmt(r)}; {HINT}")
            vals = evaluate_numpy(arg, grid)
            bad = np.where(~(vals > 0))[0]
            if bad.size:
                raise ExpressionError(
                    f"{node} is not finite at u={_fmt(grid[bad[0]])} ({type(node).__name__} of "
                    f"a non-positive number); {HINT}"
                )
            at = _near_zero(arg, grid)
            if at is None:
                at = _far_negative(arg)
            if at is not None:
                raise ExpressionError(f"{node} is not finite near u={_fmt(at)}; {HINT}")
    # 2: the whole function and its derivative on the grid, float64.
    for what, e in (("the formula", expr), ("its derivative", derivative)):
        vals = evaluate_numpy(e, grid)
        bad = np.where(~np.isfinite(vals))[0]
        if bad.size:
            raise ExpressionError(
                f"{what} is not finite at u={_fmt(grid[bad[0]])} "
                f"({'NaN' if np.isnan(vals[bad[0]]) else 'infinite'}); {HINT}"
            )
    # 4a: the limits at +-infinity must be real (bounded symbolic work, see .limits).
    check_real_at_infinity(expr)
    # 3: float32, as a kernel computes it. numpy's float32 follows the IEEE rules the kernels
    # do (overflow to inf, inf - inf = NaN), so checking here needs no torch: a formula is
    # checked in the time of its parse, not of a torch import.
    x32 = grid[np.abs(grid) <= 10.0].astype(np.float32)
    for what, e in (("the formula", expr), ("its derivative", derivative)):
        with np.errstate(all="ignore"):
            vals = evaluate_array(e, x32)
        bad = np.nonzero(~np.isfinite(vals))[0]
        if bad.size:
            at = float(x32[bad[0]])
            raise ExpressionError(f"{what} is not finite in float32 at u={_fmt(at)}; {HINT}")
