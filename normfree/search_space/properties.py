"""The properties of science.md section 4, computed for every candidate.

Exact (symbolic) where that is cheap and bounded: f(0), f'(0) (from the kernel-safe derivative),
odd symmetry (when sympy's automatic simplification makes f(-u) + f(u) vanish), and the kinks at
exact rational roots; the limits at +-infinity and the growth label from sympy's limits where the
expression is small enough for them to be cheap (:mod:`.limits`). Everything else is numeric on
fixed grids in float64, with documented tolerances, because symbolic limits and root finding can
run unboundedly on larger user input:

- grids: a dense linear grid over [-50, 50] (step 1e-3 near 0 for the flat region) and a
  log-spaced grid of |u| up to 1e16 for the behaviour at infinity;
- bounded: the sup of |f| over each decade stops growing (it grows by < 1% of its size from
  |u| = 1e8 to 1e16); limits at +-infinity are reported when f settles (spread < 1e-6 over
  |u| in [1e12, 1e16]), as f(+-1e16);
- growth of unbounded f: the local power exponent p = d log sup|f| / d log u over [1e8, 1e16]:
  ~1 linear, > 1 super-linear, a constant p < 1 a sub-linear power (exponent p), a p that keeps
  falling (as 1/log u does) logarithmic; an overflow to inf is exponential;
- monotone: the sign of f' on the grids, and of the differences of f (catching jumps);
- smoothness: at every point where an Abs/sign/clip/Piecewise switches (exact rational roots and
  numerically located ones), continuity and equality of the one-sided slopes; where a slope grows
  without bound toward a kink, its power p (|f'| ~ |u - c|^-p, read over twelve decades): at
  p >= 1/2, f'^2 is not integrable there, so the backward signal of any input density that is
  positive at c has unbounded variance (``heavy_tailed_slope``: exproot at 0, not power23clip
  with p = 1/3). Why a property: on a CPU screen's small batches that variance is per-step
  gradient noise, and such functions place far below where scale puts them
  (bench/results/diagnoses-issue25.md section 2f).
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Literal

import numpy as np
import sympy
from pydantic import BaseModel, ConfigDict

from normfree.search_space._derivative import kink_arguments, kink_points
from normfree.search_space._numeric import evaluate_numpy, evaluate_point, node_count
from normfree.search_space._parser import U
from normfree.search_space.limits import side_from_limits
from normfree.search_space.primitives import heads

if TYPE_CHECKING:
    from normfree.search_space.candidate import Candidate

Monotone = Literal["increasing", "decreasing", "constant", "neither"]
Growth = Literal[
    "bounded", "logarithmic", "sub-linear power", "linear", "super-linear", "exponential"
]

_DENSE = np.linspace(-50.0, 50.0, 100001)  # step 1e-3, contains 0
_DECADES = np.logspace(0.0, 16.0, 1601)  # 100 points per decade
_TOL = 1e-12
_PREC = 40


class Properties(BaseModel):
    """What a candidate is, as numbers a study can filter and a person can read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # zero-centredness
    f0: float
    zero_centred: bool  # f(0) == 0
    odd: bool  # f(-u) == -f(u)
    odd_method: Literal["symbolic", "numeric"]
    # boundedness
    bounded: bool
    limit_neg: float | None  # lim f at -inf, when f settles there
    limit_pos: float | None  # lim f at +inf
    range_min: float | None  # inf f (None: unbounded below)
    range_max: float | None  # sup f (None: unbounded above)
    growth: Growth
    growth_exponent: float | None  # p of the sub-linear/linear/super-linear power
    # center sensitivity
    slope0: float  # f'(0), exact where finite (see the derivative convention)
    flat_halfwidth: float  # half-width of a constant region around 0 (0: none)
    flat_region: tuple[float, float] | None
    # monotonicity
    monotone: Monotone
    turning_points: tuple[float, ...]  # where f' changes sign (first 10 by |u|, |u| <= 50)
    # smoothness
    continuous: bool
    differentiable: bool
    discontinuities: tuple[float, ...]
    non_differentiable_at: tuple[float, ...]
    # kinks where |f'| grows like |u - c|^-p with p >= 1/2 (f'^2 not integrable): a gradient of
    # unbounded variance. Defaults: a property analysed before these fields existed has none.
    heavy_tailed_slope: bool = False
    heavy_tailed_at: tuple[float, ...] = ()

    def summary(self) -> str:
        """One short line for tables."""
        parts = [
            "zero-centred" if self.zero_centred else f"f(0)={self.f0:.3g}",
            "odd" if self.odd else "not odd",
            "bounded" if self.bounded else f"{self.growth}",
            self.monotone,
            f"f'(0)={self.slope0:.3g}",
        ]
        if self.flat_halfwidth > 0:
            parts.append(f"flat ±{self.flat_halfwidth:.3g}")
        if self.discontinuities:
            parts.append("jumps at " + ",".join(f"{p:.3g}" for p in self.discontinuities))
        if self.non_differentiable_at:
            parts.append("kinks at " + ",".join(f"{p:.3g}" for p in self.non_differentiable_at))
        if self.heavy_tailed_at:
            at = ",".join(f"{p:.3g}" for p in self.heavy_tailed_at)
            parts.append(f"heavy-tailed slope at {at}")
        return ", ".join(parts)


def _exact_at(expr: sympy.Expr, at: sympy.Expr) -> float | None:
    return evaluate_point(expr, at, dps=_PREC)


def _f(expr: sympy.Expr, x: np.ndarray | float) -> np.ndarray:
    return evaluate_numpy(expr, x)


def _clean(v: float, digits: int = 12) -> float:
    """Round away float noise so tables and JSON read 1.0, not 0.9999999999999998."""
    if v == 0:
        return 0.0
    if not math.isfinite(v):
        return float(v)
    r = round(v, digits)
    return 0.0 if r == 0 else r


# -- symmetry --------------------------------------------------------------------------------


def _odd(expr: sympy.Expr, values: np.ndarray) -> tuple[bool, Literal["symbolic", "numeric"]]:
    try:
        if expr.xreplace({U: -U}) + expr == 0:
            return True, "symbolic"
    except (TypeError, ValueError):
        pass
    mirrored = _f(expr, -_DENSE)
    scale = max(1.0, float(np.nanmax(np.abs(values))))
    return bool(np.nanmax(np.abs(values + mirrored)) <= 1e-9 * scale), "numeric"


# -- behaviour at infinity -------------------------------------------------------------------


def _decade_sups(vals: np.ndarray) -> np.ndarray:
    """sup |f| over each decade of _DECADES (16 values)."""
    per = (len(_DECADES) - 1) // 16
    return np.array([np.max(np.abs(vals[k * per : (k + 1) * per + 1])) for k in range(16)])


def _symbolic_limit(expr: sympy.Expr, sign: int) -> float | None:
    """lim f(u) as u -> sign*inf by sympy, only for small expressions without switches.

    Used only to confirm a slowly converging bounded f (saturlog ~ 1 - 1/log u), where numeric
    values at |u| = 1e16 are still far from the limit. Guarded by size because symbolic limits
    can run for very long on large nested input.
    """
    p = sympy.Symbol("p", positive=True)
    e = expr.xreplace({U: sign * p})  # Abs(±p) and sign(±p) evaluate away here
    switches = (sympy.Min, sympy.Max, sympy.Piecewise, *heads(lambda p: p.kink))
    if node_count(e) > 40 or e.has(*switches):
        return None
    try:
        lim = sympy.limit(e, p, sympy.oo)
        value = float(lim)
    except (TypeError, ValueError, NotImplementedError, RecursionError, AttributeError):
        return None
    return value if math.isfinite(value) else None


def _side(expr: sympy.Expr, sign: float) -> tuple[bool, float | None, str, float | None]:
    """(bounded, limit, growth, exponent) towards sign * infinity.

    Exact limits decide when sympy can take them (:mod:`.limits`); the decade grid below is the
    fallback for expressions too large for that or with min/max/clip left in them.
    """
    exact = side_from_limits(expr, int(sign))
    if exact is not None:
        bounded, lim, growth, p = exact
        return bounded, None if lim is None else _clean(lim, 9), growth, p
    vals = _f(expr, sign * _DECADES)
    finite = np.isfinite(vals)
    if not np.all(finite):
        first_bad = float(_DECADES[int(np.argmin(finite))])
        if first_bad < 1e9:
            return False, None, "exponential", None
        # A high power overflows float64 only far out (u**32 at 1e10): measure p below 1e8.
        sups = _decade_sups(np.where(finite, vals, 0.0))
        p = math.log(sups[7] / sups[3]) / math.log(1e4)
        return False, None, "super-linear", round(p, 3)
    sups = _decade_sups(vals)
    grew = sups[15] - sups[7]
    inc_mid, inc_far = sups[8] - sups[7], sups[15] - sups[14]
    # Converging: hardly grows, or its per-decade increments shrink faster than 1/decade
    # (c/log u convergence gives increments ~ 1/k^2; log growth constant ones; log log ~ 1/k).
    if grew <= 1e-2 * max(1.0, sups[7]) or (inc_mid > 0 and inc_far / inc_mid < 0.35):
        tail = vals[_DECADES >= 1e12]
        if float(np.max(tail) - np.min(tail)) <= 1e-6:
            return True, _clean(float(vals[-1]), 9), "bounded", None
        return True, _symbolic_limit(expr, int(sign)), "bounded", None
    s4, s8, s16 = sups[3], sups[7], sups[15]
    p1 = math.log(s8 / s4) / math.log(1e4) if s4 > 0 else math.inf
    p2 = math.log(s16 / s8) / math.log(1e8)
    if p2 > 1.05:
        return False, None, "super-linear", round(p2, 3)
    if abs(p2 - 1.0) <= 0.05:
        return False, None, "linear", 1.0
    if p2 >= 0.1 and p2 >= 0.8 * p1:
        return False, None, "sub-linear power", round(p2, 3)
    return False, None, "logarithmic", None


_GROWTH_ORDER = [
    "bounded",
    "logarithmic",
    "sub-linear power",
    "linear",
    "super-linear",
    "exponential",
]


# -- centre ----------------------------------------------------------------------------------


def _flat_side(expr: sympy.Expr, f0: float, sign: float) -> float:
    """How far from 0 (towards ``sign``) f stays exactly f(0), refined by bisection."""
    tol = 4 * np.finfo(float).eps * abs(f0)  # exact flatness: u**9 near 0 is not flat
    grid = sign * _DENSE[_DENSE >= 0]  # 0, 1e-3, ... 50
    vals = _f(expr, grid)
    off = np.abs(vals - f0) > tol
    if not off.any():
        return 50.0
    first = int(np.argmax(off))
    if first <= 1:
        return 0.0
    lo, hi = abs(grid[first - 1]), abs(grid[first])
    for _ in range(60):
        mid = (lo + hi) / 2
        if abs(_f(expr, sign * mid)[0] - f0) > tol:
            hi = mid
        else:
            lo = mid
    return round(lo, 9)


# -- smoothness ------------------------------------------------------------------------------


def _switch_points(expr: sympy.Expr) -> list[float]:
    """Points where an Abs/sign/power base, a Min/Max pair or a Piecewise condition switches."""
    funcs: list[sympy.Expr] = list(kink_arguments(expr))
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (sympy.Min, sympy.Max)):
            a = node.args
            funcs += [a[i] - a[j] for i in range(len(a)) for j in range(i + 1, len(a))]
        elif isinstance(node, (sympy.core.relational.Relational)):
            funcs.append(node.lhs - node.rhs)
    points: set[float] = {float(c) for c in kink_points(expr)}
    grid = _DENSE[::10]  # step 1e-2
    for g in funcs:
        if not g.free_symbols:
            continue
        vals = _f(g, grid)
        zero = np.where(vals == 0)[0]
        points.update(float(grid[i]) for i in zero[:10])
        change = np.where(np.sign(vals[:-1]) * np.sign(vals[1:]) < 0)[0]
        for i in change[:10]:
            try:
                import scipy.optimize  # here: only sign changes need it (import is 0.3 s)

                root = scipy.optimize.brentq(
                    lambda t, g=g: float(_f(g, t)[0]), grid[i], grid[i + 1], xtol=1e-14
                )
            except (ValueError, RuntimeError):
                continue
            points.add(float(root))
        if len(points) > 40:
            break
    return sorted(points)[:40]


def _beside(
    e: sympy.Expr, c: float, exact: sympy.Rational | None, direction: int
) -> tuple[float | None, float | None, float]:
    """(e near c, e nearer c, decades between them) on one side of ``c``.

    Exactly at c -+ 1e-12 and 1e-24 where ``c`` is a known kink point (twelve decades resolve a
    slowly growing slope), else in float64 at c -+ 1e-5 and 1e-8 (three decades, as far as
    float64 reaches beside a numerically found point). One home for "beside c": continuity, the
    one-sided slopes and the slope's power all read it.
    """
    if exact is not None:
        near = _exact_at(e, exact + direction * sympy.Rational(1, 10**12))
        nearer = _exact_at(e, exact + direction * sympy.Rational(1, 10**24))
        return near, nearer, 12.0
    return float(_f(e, c + direction * 1e-5)[0]), float(_f(e, c + direction * 1e-8)[0]), 3.0


def _one_sided(e: sympy.Expr, c: float, exact: sympy.Rational | None) -> tuple[list, float | None]:
    """[e(c-), e(c+)] (None when not settling to a finite value) and e(c)."""
    sides = []
    for direction in (-1, 1):
        near, nearer, _ = _beside(e, c, exact, direction)
        ok = (
            near is not None
            and nearer is not None
            and math.isfinite(near)
            and math.isfinite(nearer)
            and abs(near - nearer) <= 1e-4 * (1 + abs(nearer))
        )
        sides.append(nearer if ok else None)
    at = _exact_at(e, exact) if exact is not None else float(_f(e, c)[0])
    return sides, at


# |f'| ~ |u - c|^-p with p at least this is a slope whose square is not integrable at c (p = 1/2
# exactly, exproot's, diverges logarithmically; the margin absorbs a slowly varying factor such as
# exproot's exp(-sqrt|u|), which reads p = 0.4999996 over twelve decades).
_HEAVY_TAIL_P = 0.48


def _slope_power(d: sympy.Expr, c: float, exact: sympy.Rational | None, direction: int) -> float:
    """p of |f'| ~ |u - c|^-p on one side of ``c`` (0 when the slope stays finite)."""
    near, nearer, decades = _beside(d, c, exact, direction)
    if near is None or nearer is None or not (math.isfinite(near) and math.isfinite(nearer)):
        return 0.0
    if abs(near) <= 1e-300 or abs(nearer) <= abs(near):
        return 0.0
    return math.log10(abs(nearer) / abs(near)) / decades


def _smoothness(
    cand: Candidate,
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """(discontinuities, kinks, the kinks whose slope is heavy-tailed)."""
    exact_points = {float(c): c for c in kink_points(cand.expr)}
    discontinuities, kinks, heavy = [], [], []
    for c in _switch_points(cand.expr):
        exact = exact_points.get(c)
        fc = _exact_at(cand.expr, exact) if exact is not None else float(_f(cand.expr, c)[0])
        # Continuity is f at c -+ 1e-24 within 1e-6 of f(c), not f settling over twelve decades:
        # sign(u)*abs(u)**0.3 is continuous at 0 yet still moves by 2.5e-4 between 1e-12 and 1e-24.
        if (
            fc is None
            or not math.isfinite(fc)
            or any(
                v is None or not math.isfinite(v) or abs(v - fc) > 1e-6 * (1 + abs(fc))
                for v in (_beside(cand.expr, c, exact, side)[1] for side in (-1, 1))
            )
        ):
            discontinuities.append(_clean(c, 9))
            continue
        (dl, dr), _ = _one_sided(cand.derivative, c, exact)
        if dl is None or dr is None or abs(dl - dr) > 1e-4 * (1 + abs(dl) + abs(dr)):
            kinks.append(_clean(c, 9))
            if dl is None or dr is None:  # a slope that does not settle: how fast it grows
                p = max(_slope_power(cand.derivative, c, exact, side) for side in (-1, 1))
                if p >= _HEAVY_TAIL_P:
                    heavy.append(_clean(c, 9))
    return (
        tuple(sorted(set(discontinuities))),
        tuple(sorted(set(kinks))),
        tuple(sorted(set(heavy))),
    )


# -- monotonicity ----------------------------------------------------------------------------


def _monotone(cand: Candidate, values: np.ndarray) -> tuple[Monotone, tuple[float, ...]]:
    grid = np.concatenate([-_DECADES[::-1], _DENSE, _DECADES])
    grid = np.unique(grid)
    d = _f(cand.derivative, grid)
    f = _f(cand.expr, grid)
    ok = np.isfinite(f) & np.isfinite(d)  # far out an exponential may overflow
    grid, d, f = grid[ok], d[ok], f[ok]
    scale = max(1.0, float(np.max(np.abs(d))))
    tol = 1e-10 * scale
    diffs = np.diff(f)
    ftol = 1e-12 * max(1.0, float(np.max(np.abs(f))))
    up = bool(np.all(d >= -tol) and np.all(diffs >= -ftol))
    down = bool(np.all(d <= tol) and np.all(diffs <= ftol))
    if up and down:
        return "constant", ()
    if up:
        return "increasing", ()
    if down:
        return "decreasing", ()
    dd = _f(cand.derivative, _DENSE)
    s = np.sign(np.where(np.abs(dd) <= tol, 0.0, dd))
    nz = np.where(s != 0)[0]
    turning = []
    for a, b in itertools.pairwise(nz):
        if s[a] != s[b]:
            turning.append(_clean(float((_DENSE[a] + _DENSE[b]) / 2), 3))
    turning.sort(key=abs)
    return "neither", tuple(sorted(turning[:10]))


# -- all together ----------------------------------------------------------------------------


def compute_properties(cand: Candidate) -> Properties:
    """The :class:`Properties` of ``cand`` (bounded work: fixed grids, no symbolic limits)."""
    expr = cand.expr
    f0 = _exact_at(expr, sympy.S.Zero)
    f0 = float(_f(expr, 0.0)[0]) if f0 is None else f0
    slope0 = _exact_at(cand.derivative, sympy.S.Zero)
    slope0 = float(_f(cand.derivative, 0.0)[0]) if slope0 is None else slope0
    values = _f(expr, _DENSE)
    odd, odd_method = _odd(expr, values)

    neg = _side(expr, -1.0)
    pos = _side(expr, 1.0)
    bounded = neg[0] and pos[0]
    growth = max((neg[2], pos[2]), key=_GROWTH_ORDER.index)
    exponents = [s[3] for s in (neg, pos) if s[2] == growth and s[3] is not None]
    far = np.concatenate([values, _f(expr, _DECADES), _f(expr, -_DECADES)])
    far = far[np.isfinite(far)]
    unbounded_below = unbounded_above = False
    for side, sign in ((neg, -1.0), (pos, 1.0)):
        if not side[0]:
            tail = _f(expr, sign * _DECADES[-400:])  # |u| in [1e12, 1e16]
            seen = tail[~np.isnan(tail)]
            if seen.size == 0 or seen.size < tail.size:  # overflow to inf - inf: either way
                unbounded_above = unbounded_below = True
                continue
            big = float(np.max(np.abs(seen)))
            unbounded_above |= bool(np.max(seen) >= 0.5 * big)
            unbounded_below |= bool(np.min(seen) <= -0.5 * big)
    limits = [v for v in (neg[1], pos[1]) if v is not None]
    if limits:
        far = np.concatenate([far, limits])
    left = _flat_side(expr, f0, -1.0)
    right = _flat_side(expr, f0, 1.0)
    monotone, turning = _monotone(cand, values)
    discontinuities, kinks, heavy = _smoothness(cand)
    return Properties(
        f0=_clean(f0),
        zero_centred=abs(f0) <= _TOL,
        odd=odd,
        odd_method=odd_method,
        bounded=bounded,
        limit_neg=neg[1],
        limit_pos=pos[1],
        range_min=None if unbounded_below else _clean(float(np.min(far)), 9),
        range_max=None if unbounded_above else _clean(float(np.max(far)), 9),
        growth=growth,  # type: ignore[arg-type]
        growth_exponent=max(exponents) if exponents else None,
        slope0=_clean(slope0),
        flat_halfwidth=min(left, right),
        flat_region=(-left, right) if (left > 0 or right > 0) else None,
        monotone=monotone,
        turning_points=turning,
        continuous=not discontinuities,
        differentiable=not discontinuities and not kinks,
        discontinuities=discontinuities,
        non_differentiable_at=kinks,
        heavy_tailed_slope=bool(heavy),
        heavy_tailed_at=heavy,
    )


__all__ = ["Properties", "compute_properties"]
