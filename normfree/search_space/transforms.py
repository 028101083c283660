"""Property-ablation transforms (science.md section 3) as named, composable catalog citizens.

Each transform is defined once, in :data:`TRANSFORMS`, as a rule on sympy expressions plus its
parameter names; the Python functions (``shift_h(candidate, 0.5)``), the text form
(``catalog.resolve("shift_h(erf, 0.5)")``) and the lineage all come from that one table. A
transform's result is a full :class:`Candidate` (re-validated, exact derivative) whose name is its
call text and whose lineage records the base and every step with its parameters.

``flat_centre`` and ``linear_part`` are this project's reading of the paper's prose (science.md);
another reading would be added beside them under a new name, never by editing these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import sympy

from normfree.search_space._parser import U
from normfree.search_space._syntax import MAX_CONSTANT, MIN_CONSTANT
from normfree.search_space.candidate import (
    Candidate,
    Lineage,
    TransformStep,
    build_candidate,
    format_param,
)
from normfree.search_space.errors import ExpressionError


@dataclass(frozen=True)
class Transform:
    """One transform: its parameter names, the rule, and what it ablates (for docs and UIs)."""

    name: str
    params: tuple[str, ...]
    rule: Callable[..., sympy.Expr]  # (expr, *params as exact sympy numbers) -> expr
    formula: str  # human-readable definition
    ablates: str
    check: Callable[..., str | None] = lambda *p: None  # parameter validation -> reason
    # The parameters at which the transform is the identity (``shift_h(f, 0)`` is f): one
    # function, one arm (``resolver.spelling(..., collapse=True)``). None: never.
    identity: tuple[float, ...] | None = None


def _positive(lam: float) -> str | None:
    return None if lam > 0 else "lam must be > 0"


def _non_negative(lam: float) -> str | None:
    return None if lam >= 0 else "lam must be >= 0"


TRANSFORMS: dict[str, Transform] = {
    t.name: t
    for t in (
        Transform(
            "shift_h",
            ("lam",),
            lambda f, lam: f.xreplace({U: U + lam}),
            "f(u + lam)",
            "zero-centredness (horizontal shift)",
            identity=(0.0,),
        ),
        Transform(
            "shift_v",
            ("lam",),
            lambda f, lam: f + lam,
            "f(u) + lam",
            "zero-centredness (vertical shift)",
            identity=(0.0,),
        ),
        Transform(
            "clip",
            ("lam",),
            lambda f, lam: sympy.Min(sympy.Max(f, -lam), lam),
            "min(max(f(u), -lam), lam)",
            "boundedness (clip an unbounded f)",
            _positive,
        ),
        Transform(
            "linear_part",
            ("lam_b",),
            lambda f, lb: (1 - lb) * f + lb * U,
            "(1 - lam_b) * f(u) + lam_b * u",
            "boundedness (add a linear part)",
            identity=(0.0,),
        ),
        Transform(
            "flat_centre",
            ("lam",),
            lambda f, lam: sympy.Piecewise(
                (sympy.S.Zero, sympy.Abs(U) <= lam),
                (f.xreplace({U: U - lam * sympy.sign(U)}), True),
            ),
            "0 if |u| <= lam else f(u - lam*sign(u))",
            "center sensitivity (flat centre)",
            _non_negative,
            identity=(0.0,),
        ),
        Transform("sign_flip", (), lambda f: -f, "-f(u)", "monotonicity (sign flip)"),
    )
}


def _exact(value: float | int | str) -> tuple[float, sympy.Rational]:
    """A parameter as (float, exact rational from its shortest decimal text)."""
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise ExpressionError(f"transform parameter {value!r} is not a number") from None
    if not math.isfinite(as_float) or abs(as_float) > MAX_CONSTANT:
        raise ExpressionError(
            f"transform parameter {value!r} must be finite and within ±{MAX_CONSTANT:g}"
        )
    if as_float != 0 and abs(as_float) < MIN_CONSTANT:  # the parser's rule for every constant
        raise ExpressionError(
            f"transform parameter {value!r} is too small: non-zero constants must have "
            f"magnitude >= {MIN_CONSTANT:g}"
        )
    frac = Fraction(format_param(as_float))
    return as_float, sympy.Rational(frac.numerator, frac.denominator)


def apply(name: str, base: Candidate, *params: float) -> Candidate:
    """Apply transform ``name`` with ``params`` (in the order of ``TRANSFORMS[name].params``)."""
    if name not in TRANSFORMS:
        raise ExpressionError(f"unknown transform {name!r}: one of {', '.join(TRANSFORMS)}")
    t = TRANSFORMS[name]
    if len(params) != len(t.params):
        raise ExpressionError(
            f"{name}() takes a function and {len(t.params)} parameter(s) "
            f"({', '.join(t.params) or 'none'}), got {len(params)}"
        )
    exact = [_exact(p) for p in params]
    reason = t.check(*(f for f, _ in exact))
    if reason:
        raise ExpressionError(f"{name}(): {reason}")
    values = {k: f for k, (f, _) in zip(t.params, exact, strict=True)}
    step = TransformStep(transform=name, params=values)
    lineage = Lineage(
        base=base.lineage.base, formula=base.lineage.formula, steps=(*base.lineage.steps, step)
    )
    call = step.call(base.name)
    expr = t.rule(base.expr, *(r for _, r in exact))
    return build_candidate(
        expr,
        name=call,
        formula=call,
        lineage=lineage,
        group=base.group,
        citation=base.citation,
        description=f"{t.formula} of {base.name}: {t.ablates}",
    )


def _make_api(t: Transform) -> Callable[..., Candidate]:
    def fn(base: Candidate, *params: float) -> Candidate:
        return apply(t.name, base, *params)

    fn.__name__ = t.name
    fn.__doc__ = f"{t.name}(f{''.join(', ' + p for p in t.params)}) = {t.formula}: {t.ablates}."
    return fn


shift_h = _make_api(TRANSFORMS["shift_h"])
shift_v = _make_api(TRANSFORMS["shift_v"])
clip = _make_api(TRANSFORMS["clip"])
linear_part = _make_api(TRANSFORMS["linear_part"])
flat_centre = _make_api(TRANSFORMS["flat_centre"])
sign_flip = _make_api(TRANSFORMS["sign_flip"])

_SHIFTS = (-2.0, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.0)
_NATURAL = ("erf", "tanh", "arctan")

# The paper's property-study grids (science.md section 3), as data for the studies layer.
# "values" are the transform's single parameter; None in a values list means "untransformed".
PAPER_GRIDS: dict[str, dict[str, object]] = {
    "shift_h": {"property": "zero-centredness", "bases": _NATURAL, "values": _SHIFTS},
    "shift_v": {"property": "zero-centredness", "bases": _NATURAL, "values": _SHIFTS},
    "clip": {
        "property": "boundedness",
        "bases": ("asinh", "logsign", "linear"),
        "values": (0.5, 0.8, 1.0, 2.0, 3.0, 5.0, None),
    },
    "linear_part": {
        "property": "boundedness",
        "bases": ("erf", "tanh", "arctan", "isru"),
        "values": (0.01, 0.1, 0.5),
    },
    "growth": {
        "property": "boundedness (growth rate)",
        "bases": ("linear", "power23", "logsign", "logquad", "asinh"),
        "values": (None,),
    },
    "flat_centre": {
        "property": "center sensitivity",
        "bases": _NATURAL,
        "values": (0.1, 0.5, 1.0, 2.0, 3.0),
    },
    "sign_flip": {"property": "monotonicity", "bases": _NATURAL, "values": (None,)},
    "non_monotonic": {
        "property": "monotonicity",
        "bases": ("sin", "dampx", "dampexp"),
        "values": (None,),
    },
}


def grid_calls(study: str) -> list[str]:
    """The ``catalog.resolve`` texts of one paper grid (``shift_h(erf, -2)``, ..., ``erf``)."""
    grid = PAPER_GRIDS[study]
    out = []
    for base in grid["bases"]:  # type: ignore[union-attr]
        for v in grid["values"]:  # type: ignore[union-attr]
            if v is None:
                out.append(base if study not in ("sign_flip",) else f"sign_flip({base})")
            else:
                out.append(f"{study}({base}, {format_param(v)})")
    return out


__all__ = [
    "PAPER_GRIDS",
    "TRANSFORMS",
    "Transform",
    "apply",
    "clip",
    "flat_centre",
    "grid_calls",
    "linear_part",
    "shift_h",
    "shift_v",
    "sign_flip",
]
