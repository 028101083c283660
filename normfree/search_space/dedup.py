"""Canonical form and behavioural fingerprint: recognising the same function submitted twice.

Two complementary tests, because neither is enough alone:

- the *canonical form* is the text of sympy's automatically canonicalised expression (exact
  rationals, sorted commutative arguments, the parser's rewrites such as sigmoid -> tanh). It is
  cheap and bounded (no ``simplify``: that can run for minutes on hostile input) and catches the
  syntactic variants: ``2*sigmoid(2*u) - 1`` *is* ``tanh(u)`` after rewriting.
- the *fingerprint* compares behaviour: the values on a fixed probe grid (201 points in [-8, 8],
  including 0, plus |u| in {10, 20, 50, 100}) in float64. ``same_function`` compares probe
  vectors with a relative tolerance of 1e-9; ``fingerprint`` is a short hash of the values rounded
  to 7 significant digits, an index key (near a rounding boundary two equal functions may hash
  apart, so the final word is always ``same_function``).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import sympy

from normfree.search_space._numeric import evaluate_numpy

if TYPE_CHECKING:
    from normfree.search_space.candidate import Candidate

# Large |u| up to the domain radius (100): beyond it a formula may legitimately overflow.
_LARGE = np.array([10.0, 20.0, 50.0, 100.0])
PROBE_GRID: np.ndarray = np.unique(
    np.concatenate([np.round(np.linspace(-8.0, 8.0, 201), 12), _LARGE, -_LARGE])
)
RTOL = 1e-9
ATOL = 1e-12


_MAX_EXPANDED_TERMS = 64


def _expanded_terms(expr: sympy.Basic) -> int:
    """Upper bound of the number of terms ``expand(mul=True, deep=True)`` would produce."""
    if isinstance(expr, sympy.Add):
        return sum(_expanded_terms(a) for a in expr.args)
    if isinstance(expr, sympy.Mul):
        n = 1
        for a in expr.args:
            n *= _expanded_terms(a)
            if n > _MAX_EXPANDED_TERMS:
                return n
        return n
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and isinstance(expr.base, sympy.Add):
        return _MAX_EXPANDED_TERMS + 1  # multinomials are never expanded
    # inside a function or a power the argument is expanded on its own
    for a in expr.args:
        if isinstance(a, sympy.Basic) and _expanded_terms(a) > _MAX_EXPANDED_TERMS:
            return _MAX_EXPANDED_TERMS + 1
    return 1


def canonical_form(expr: sympy.Expr) -> str:
    """Deterministic text of the expression after cheap, bounded normalisation.

    Products are distributed over sums (``sign(u)*(1 - exp(-|u|))`` and
    ``sign(u) - sign(u)*exp(-|u|)`` read the same) only when the result stays small (at most
    64 terms, no multinomial powers); then sympy's ordered printer. Never ``simplify``.
    """
    if _expanded_terms(expr) <= _MAX_EXPANDED_TERMS:
        expr = sympy.expand(
            expr, deep=True, mul=True, multinomial=False, power_exp=False, power_base=False,
            log=False, basic=False,
        )  # fmt: skip
    return sympy.sstr(expr, order="lex")


def probe_values(expr: sympy.Expr) -> np.ndarray:
    """f on :data:`PROBE_GRID`, float64."""
    return evaluate_numpy(expr, PROBE_GRID)


def fingerprint(expr: sympy.Expr) -> str:
    """A 16-hex-digit hash of the probe values rounded to 7 significant digits."""
    vals = probe_values(expr)
    parts = []
    for v in vals:
        if not np.isfinite(v):
            parts.append(str(v))
        elif abs(v) < 1e-9:
            parts.append("0")
        else:
            parts.append(f"{v:.6e}")
    return hashlib.sha256(",".join(parts).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=4096)
def _probe_cached(expr: sympy.Expr) -> np.ndarray:
    values = probe_values(expr)
    values.setflags(write=False)  # shared between callers
    return values


def _values(c: Candidate) -> np.ndarray:
    """Probe values by expression, remembered: a duplicate search compares one candidate with
    every catalog entry, whose values never change (most of an API submission's time)."""
    return _probe_cached(c.expr)


def same_function(a: Candidate, b: Candidate) -> bool:
    """True when ``a`` and ``b`` agree on the probe grid within a relative 1e-9."""
    if a.canonical == b.canonical:
        return True
    return same_values(_values(a), _values(b))


def same_values(va: np.ndarray, vb: np.ndarray) -> bool:
    """Two probe vectors (:func:`probe_values`) are one function: the same non-finite points,
    equal there, and within a relative 1e-9 elsewhere."""
    both_finite = np.isfinite(va) & np.isfinite(vb)
    if not np.array_equal(np.isfinite(va), np.isfinite(vb)):
        return False
    if not np.all(va[~both_finite] == vb[~both_finite]):
        return False
    return bool(np.allclose(va[both_finite], vb[both_finite], rtol=RTOL, atol=ATOL))


def find_duplicate(candidate: Candidate, pool: Iterable[Candidate]) -> Candidate | None:
    """The first member of ``pool`` that is the same function as ``candidate`` (else None)."""
    for other in pool:
        if other is candidate:
            continue
        if other.canonical == candidate.canonical or same_function(candidate, other):
            return other
    return None
