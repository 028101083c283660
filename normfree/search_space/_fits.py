"""The fitted polynomials behind some primitives' kernel helpers (see :mod:`.primitives`).

Triton's interpreter has no atan, and libm's vector erf costs more per element than LayerNorm's
whole step on CPU, so those helpers evaluate fits. The fits are reproducible from their
definition here rather than pasted from a book:

- atan on [0, 1]: an odd polynomial ``t * P(t^2)`` fitted by least squares on Chebyshev nodes
  when first asked for (deterministic: fixed nodes, LAPACK lstsq); its fp32 evaluation error is
  ~8e-8.
- erf on [0, :data:`ERF_CLAMP`]: ``x P(x^2) / Q(x^2)``, one rational function, cheaper in SIMD
  code than two branches plus an exp (both sides of a select are evaluated). :data:`ERF_P` and
  :data:`ERF_Q` are the literals :func:`erf_rational_fit` produced (linearised least squares
  with Lawson reweighting towards minimax); shipping the literals keeps a LAPACK build's last
  digits out of the kernel source, and a test reruns the fit.

numpy is imported inside the fits: :mod:`.primitives` (read by the parser's quick syntax pass)
only asks for them when a printer writes a kernel.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ATAN_TERMS = 11  # odd polynomial t*P(t^2) with 11 terms: fp32 evaluation error ~8e-8 on [0, 1]

ERF_P = (
    1.1283791799884142,
    0.18472150298119328,
    0.05429280868038035,
    0.0038347696417296486,
    0.0003809062351144486,
    4.731535570325074e-06,
    -1.340865779519973e-08,
)
ERF_Q = (
    1.0,
    0.4970386930545004,
    0.11379441635330874,
    0.015437537980366692,
    0.0013062399024890553,
    6.354947625218047e-05,
)
ERF_CLAMP = 3.925  # erf(3.925) rounds to 1 in fp32


def chebyshev_nodes(lo: float, hi: float, n: int = 4000) -> np.ndarray:
    import numpy as np

    return lo + (hi - lo) * 0.5 * (1.0 - np.cos(np.pi * (np.arange(n) + 0.5) / n))


@functools.lru_cache(maxsize=1)
def atan_coefficients(terms: int = ATAN_TERMS) -> tuple[float, ...]:
    """Least-squares fit of atan(t) = sum_k c_k t^(2k+1) on 4000 Chebyshev nodes of [0, 1]."""
    import numpy as np

    t = chebyshev_nodes(0.0, 1.0)
    basis = np.stack([t ** (2 * k + 1) for k in range(terms)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, np.arctan(t), rcond=None)
    return tuple(float(c) for c in coef)


def erf_rational_fit(
    p_terms: int = len(ERF_P), q_terms: int = len(ERF_Q), iterations: int = 40
) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """Refit (P, Q, max float64 error) of erf(x) ~ x P(x^2) / Q(x^2), Q(0) = 1, on [0, clamp].

    Each iteration solves the linear problem x P - erf(x) (Q - 1) = erf(x) by weighted least
    squares on Chebyshev nodes; the weights 1/Q (and then sqrt|error|, Lawson's rule) move the
    solution towards the minimax rational function. The best iterate is returned.
    """
    import numpy as np

    x = chebyshev_nodes(0.0, ERF_CLAMP, 6000)
    y = np.array([math.erf(v) for v in x])
    w = np.ones_like(x)
    best: tuple[tuple[float, ...], tuple[float, ...], float] | None = None
    for it in range(iterations):
        cols = [x ** (2 * k + 1) for k in range(p_terms)]
        cols += [-y * x ** (2 * k) for k in range(1, q_terms)]
        coef, *_ = np.linalg.lstsq(np.stack(cols, 1) * w[:, None], y * w, rcond=None)
        p, q = coef[:p_terms], np.concatenate([[1.0], coef[p_terms:]])
        q_val = np.polyval(q[::-1], x * x)
        err = x * np.polyval(p[::-1], x * x) / q_val - y
        worst = float(np.abs(err).max())
        if q_val.min() > 0 and (best is None or worst < best[2]):
            best = (tuple(float(c) for c in p), tuple(float(c) for c in q), worst)
        w = (np.abs(err) ** 0.5 if it >= 3 else 1.0) / np.abs(q_val)
        w = np.maximum(w / w.max(), 1e-3)
    assert best is not None
    return best


def horner(coefs: tuple[float, ...], var: str, suffix: str = "") -> str:
    """``c0 + var * (c1 + var * (...))`` as source text; ``suffix`` "f" makes C float literals."""
    text = f"{coefs[-1]!r}{suffix}"
    for c in reversed(coefs[:-1]):
        text = f"({text}) * {var} + {c!r}{suffix}"
    return text


def exp_taylor(degree: int = 6) -> tuple[float, ...]:
    """1/k! for k = 0..degree: e^r on |r| <= ln2/2 (truncation <= 1.2e-7 relative at 6)."""
    return tuple(1.0 / math.factorial(k) for k in range(degree + 1))


__all__ = [
    "ATAN_TERMS",
    "ERF_CLAMP",
    "ERF_P",
    "ERF_Q",
    "atan_coefficients",
    "chebyshev_nodes",
    "erf_rational_fit",
    "exp_taylor",
    "horner",
]
