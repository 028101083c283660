"""Printers: one sympy expression and its derivative -> torch or Triton source.

A printer is a table of known functions plus a few special cases (``Pow``, ``Piecewise``, ``Min``/
``Max``, numbers), in the manner of sympy's own code printers, but written for the closed node set
that ``search_space`` guarantees (brief: numbers, Add, Mul, Pow with a constant exponent, Abs, sign,
exp, log, erf, erfc, tanh, atan, asinh, sinh, cosh, sin, cos, Min, Max, Piecewise over
relations/And/Or/Not). Anything else raises :class:`PrinterError` instead of printing something
approximate.

``f`` and ``f'`` go through one :func:`sympy.cse` call, so the shared work (``tanh(u)`` in
``1 - tanh(u)**2``, ``abs(u)``, ...) is computed once when both are needed (the backward kernel).

Dialect choice for Triton (stated once, here): every function is printed from *core* Triton ops
(exp, log, sqrt, sigmoid-free closed forms, where, erf) so that the SAME kernel source runs under
``TRITON_INTERPRET=1`` on CPU in the tests and compiled on a GPU. libdevice's tanh/atan/asinh do not
run in the interpreter, so they are replaced by the helpers in :data:`TRITON_HELPERS`:

- ``tanh``: ``sign(x) * (1 - e) / (1 + e)``, ``e = exp(-2|x|)`` (never overflows), with the Taylor
  series below |x| < 0.1 so small inputs keep their relative accuracy.
- ``asinh``: ``sign(x) * log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))``, and ``log(2|x|)`` above 2^28
  where ``x^2`` would overflow; odd symmetry gives large negative inputs the same accuracy.
- ``log1p``: Goldberg's trick ``t * log(1 + t) / ((1 + t) - 1)`` (exact rounding compensation).
- ``atan``: range reduction to [0, 1] (``atan(x) = pi/2 - atan(1/x)`` above 1, odd symmetry) and
  an odd polynomial of degree 21 whose coefficients are fitted by least squares on Chebyshev nodes
  when this module loads (:func:`atan_coefficients`; a test bounds its fp32 error by 2e-7).
- ``sinh``/``cosh``: from ``exp``, ``sinh`` with a Taylor branch below |x| < 0.1.
- ``erfc``: ``1 - erf(x)`` (absolute error ~1e-7; relative accuracy is lost only where erfc < 1e-7).
- ``Pow``: integer exponents by repeated multiplication (negative: one division); half-integers by
  ``sqrt``; any other constant ``p`` by ``exp(p * log(x))``. For ``x = 0`` that is 0 when p > 0 and
  inf when p < 0 (log(0) = -inf), and NaN for x < 0, the same as ``torch.pow`` (the catalog writes
  odd powers as ``sign(u) * abs(u)**p``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

import numpy as np
import sympy

from normfree.search_space.primitives import printer_functions

__all__ = [
    "TRITON_HELPERS",
    "CPrinter",
    "PrinterError",
    "TorchPrinter",
    "TritonPrinter",
    "atan_coefficients",
    "c_helpers",
    "cse_lines",
    "erf_rational_fit",
]

ATAN_TERMS = 11  # odd polynomial t*P(t^2) with 11 terms: fp32 evaluation error ~8e-8 on [0, 1]


class PrinterError(ValueError):
    """An expression outside the node set the printers know."""


@functools.lru_cache(maxsize=1)
def atan_coefficients(terms: int = ATAN_TERMS) -> tuple[float, ...]:
    """Least-squares fit of atan(t) = sum_k c_k t^(2k+1) on 4000 Chebyshev nodes of [0, 1].

    Computed at load time rather than pasted from a table, so the approximation is reproducible
    from its definition; the fit is deterministic (fixed nodes, LAPACK lstsq).
    """
    n = 4000
    t = 0.5 * (1.0 - np.cos(np.pi * (np.arange(n) + 0.5) / n))
    basis = np.stack([t ** (2 * k + 1) for k in range(terms)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, np.arctan(t), rcond=None)
    return tuple(float(c) for c in coef)


def _atan_helper() -> str:
    coefs = atan_coefficients()
    horner = repr(coefs[-1])
    for c in reversed(coefs[:-1]):
        horner = f"({horner}) * s + {c!r}"
    return f"""
@triton.jit
def _atan(x):
    # range reduction to [0, 1], then the fitted odd polynomial t * P(t^2)
    a = tl.abs(x)
    big = a > 1.0
    t = tl.where(big, 1.0 / tl.maximum(a, 1.0), a)
    s = t * t
    p = t * ({horner})
    r = tl.where(big, 1.5707963267948966 - p, p)
    return tl.where(x < 0.0, -r, r)
"""


_TANH = """
@triton.jit
def _tanh(x):
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    big = (1.0 - e) / (1.0 + e)
    s = a * a
    # Taylor to x^7 below 0.1 (next term 2e-11 relative)
    small = a * (1.0 + s * (-0.3333333333333333
                            + s * (0.13333333333333333 + s * -0.05396825396825397)))
    r = tl.where(a < 0.1, small, big)
    return tl.where(x < 0.0, -r, r)
"""

_LOG1P = """
@triton.jit
def _log1p(t):
    # Goldberg: log(1 + t) with the rounding of (1 + t) compensated; exact for tiny t
    w = 1.0 + t
    d = w - 1.0
    return tl.where(d == 0.0, t, tl.log(w) * (t / tl.where(d == 0.0, 1.0, d)))
"""

_ASINH = """
@triton.jit
def _asinh(x):
    a = tl.abs(x)
    s = a * a
    near = _log1p(a + s / (1.0 + tl.sqrt(1.0 + s)))
    far = tl.log(a) + 0.6931471805599453
    r = tl.where(a > 268435456.0, far, near)
    return tl.where(x < 0.0, -r, r)
"""

_SINH = """
@triton.jit
def _sinh(x):
    a = tl.abs(x)
    e = tl.exp(a)
    big = 0.5 * (e - 1.0 / e)
    s = a * a
    small = a * (1.0 + s * (0.16666666666666666 + s * 0.008333333333333333))
    r = tl.where(a < 0.1, small, big)
    return tl.where(x < 0.0, -r, r)
"""

_COSH = """
@triton.jit
def _cosh(x):
    e = tl.exp(tl.abs(x))
    return 0.5 * (e + 1.0 / e)
"""

_SIGN = """
@triton.jit
def _sign(x):
    # sign(0) = 0 (science.md); NaN stays NaN through x * 0
    return tl.where(x > 0.0, 1.0, tl.where(x < 0.0, -1.0, x * 0.0))
"""

_ERFC = """
@triton.jit
def _erfc(x):
    return 1.0 - tl.math.erf(x)
"""

# name -> (source, helpers it calls)
TRITON_HELPERS: dict[str, tuple[Callable[[], str], tuple[str, ...]]] = {
    "_tanh": (lambda: _TANH, ()),
    "_atan": (_atan_helper, ()),
    "_log1p": (lambda: _LOG1P, ()),
    "_asinh": (lambda: _ASINH, ("_log1p",)),
    "_sinh": (lambda: _SINH, ()),
    "_cosh": (lambda: _COSH, ()),
    "_sign": (lambda: _SIGN, ()),
    "_erfc": (lambda: _ERFC, ()),
}


def _is_atom(text: str) -> bool:
    """True when ``text`` needs no parentheses as an operand (a name, a call, a positive number)."""
    if text.replace("_", "").replace(".", "").isalnum():
        return True
    depth = 0
    if not text.endswith(")"):
        return False
    # a call like name(...) whose outer parenthesis closes at the very end
    start = text.find("(")
    if start <= 0 or not text[:start].replace("_", "").replace(".", "").isalnum():
        return False
    for i, ch in enumerate(text[start:], start):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i != len(text) - 1:
            return False
    return True


class _Printer:
    """Shared walk over the node set; subclasses fill in the dialect."""

    functions: ClassVar[dict[type, str]] = {}

    def __init__(self, variable: sympy.Symbol) -> None:
        self.variable = variable
        self.helpers: set[str] = set()

    # -- dialect hooks -------------------------------------------------------------------
    def number(self, value: float) -> str:
        return repr(float(value))

    def call(self, func: type, arg: str) -> str:
        try:
            return f"{self.functions[func]}({arg})"
        except KeyError:
            raise PrinterError(f"no {type(self).__name__} rule for {func.__name__}") from None

    def where(self, cond: str, a: str, b: str) -> str:
        raise NotImplementedError

    def minmax(self, kind: str, args: list[sympy.Expr]) -> str:
        """Min/Max folded pairwise, constants last, through the dialect's :meth:`pair`."""
        parts = [self.print(a) for a in args if not a.is_number]
        parts += [self.print(a) for a in args if a.is_number]
        text = parts[0]
        for other in parts[1:]:
            text = self.pair(kind, text, other)
        return text

    def pair(self, kind: str, a: str, b: str) -> str:
        raise NotImplementedError

    def general_pow(self, base: str, p: float) -> str:
        raise NotImplementedError

    def sqrt(self, base: str) -> str:
        raise NotImplementedError

    def nan(self) -> str:
        return "float('nan')"

    # -- the walk ------------------------------------------------------------------------
    def paren(self, expr: sympy.Basic) -> str:
        text = self.print(expr)
        if text.startswith("-") or not _is_atom(text):
            return f"({text})"
        return text

    def print(self, expr: sympy.Basic) -> str:
        if isinstance(expr, sympy.Symbol):
            return "u" if expr == self.variable else expr.name
        if expr is sympy.S.NaN:
            return self.nan()
        if getattr(expr, "is_number", False) and not isinstance(expr, sympy.Piecewise):
            value = float(expr)  # constant subtrees (sqrt(pi), 2/pi, ...) fold to one literal
            if value == float("inf") or value == float("-inf"):
                return f"float('{value}')"
            return self.number(value)
        if isinstance(expr, sympy.Add):
            return self._add(expr)
        if isinstance(expr, sympy.Mul):
            return self._mul(expr)
        if isinstance(expr, sympy.Pow):
            return self._pow(expr)
        if isinstance(expr, sympy.Piecewise):
            return self._piecewise(expr)
        if isinstance(expr, sympy.Min):
            return self.minmax("min", list(expr.args))
        if isinstance(expr, sympy.Max):
            return self.minmax("max", list(expr.args))
        if isinstance(expr, sympy.Function) and len(expr.args) == 1:
            return self.call(type(expr), self.print(expr.args[0]))
        if isinstance(expr, sympy.logic.boolalg.Boolean):
            return self._bool(expr)
        raise PrinterError(f"cannot print {type(expr).__name__}: {expr}")

    def _add(self, expr: sympy.Add) -> str:
        out = ""
        for term in expr.as_ordered_terms():
            coeff, _ = term.as_coeff_Mul()
            if coeff.is_negative:
                out += (" - " if out else "-") + self._operand(-term)
            else:
                out += (" + " if out else "") + self.print(term)
        return out

    def _operand(self, term: sympy.Expr) -> str:
        # a product or power can follow " - " bare; a sum needs parentheses
        text = self.print(term)
        return f"({text})" if isinstance(term, sympy.Add) else text

    def _mul(self, expr: sympy.Mul) -> str:
        factors = sympy.Mul.make_args(expr)
        coeff = float(sympy.Mul(*[f for f in factors if f.is_number]))
        rest = [f for f in factors if not f.is_number]
        if coeff < 0:
            return "-" + self.print(sympy.Mul(-1, expr))  # a product: unary minus is safe
        num: list[str] = []
        den: list[str] = []
        if coeff != 1.0:
            num.append(self.number(coeff))
        for factor in rest:
            if isinstance(factor, sympy.Pow) and factor.exp.is_Number and factor.exp.is_negative:
                den.append(self.paren(sympy.Pow(factor.base, -factor.exp)))
            else:
                num.append(self.paren(factor))
        top = " * ".join(num) if num else self.number(1.0)
        if not den:
            return top
        bottom = den[0] if len(den) == 1 else "(" + " * ".join(den) + ")"
        return f"{top} / {bottom}"

    def _int_pow(self, base: str, n: int) -> str:
        """x**n by repeated squaring, printed as a product (no pow call, exact for small n)."""
        if n == 1:
            return base
        if n % 2 == 0:
            half = self._int_pow(base, n // 2)
            half = half if half == base else f"({half})"
            return f"{half} * {half}"
        return f"{base} * {self._int_pow(base, n - 1)}"

    def _pow(self, expr: sympy.Pow) -> str:
        base, exponent = expr.args
        if not exponent.is_Number:
            raise PrinterError(f"exponent must be a constant: {expr}")
        b = self.paren(base)
        if exponent.is_Integer:
            n = int(exponent)
            if n == 0:
                return self.number(1.0)
            text = self._int_pow(b, abs(n))
            return text if n > 0 else f"{self.number(1.0)} / ({text})"
        if exponent.is_Rational and exponent.q == 2:
            root = self.sqrt(self.print(base))
            n = abs(int(exponent.p))
            text = root if n == 1 else f"{root} * {self._int_pow(b, (n - 1) // 2)}"
            return text if exponent > 0 else f"{self.number(1.0)} / ({text})"
        return self.general_pow(self.print(base), float(exponent))

    def _piecewise(self, expr: sympy.Piecewise) -> str:
        pieces = list(expr.args)
        last_value, last_cond = pieces[-1]
        if last_cond is sympy.true:
            text = self.print(last_value)
            pieces = pieces[:-1]
        else:
            text = self.nan()
        for value, cond in reversed(pieces):
            text = self.where(self._bool(cond), self.print(value), text)
        return text

    def _bool(self, cond: sympy.Basic) -> str:
        if isinstance(cond, sympy.Symbol):  # a condition that cse named
            return cond.name
        ops = {
            sympy.StrictLessThan: "<",
            sympy.LessThan: "<=",
            sympy.StrictGreaterThan: ">",
            sympy.GreaterThan: ">=",
            sympy.Equality: "==",
            sympy.Unequality: "!=",
        }
        for kind, op in ops.items():
            if isinstance(cond, kind):
                return f"({self.print(cond.lhs)} {op} {self.print(cond.rhs)})"
        if isinstance(cond, sympy.And):
            return "(" + " & ".join(self._bool(a) for a in cond.args) + ")"
        if isinstance(cond, sympy.Or):
            return "(" + " | ".join(self._bool(a) for a in cond.args) + ")"
        if isinstance(cond, sympy.Not):
            return f"({self._bool(cond.args[0])} == 0)"
        raise PrinterError(f"cannot print condition {cond}")


class TorchPrinter(_Printer):
    """Python over torch tensors (the CPU path and ``torch.compile``'s input)."""

    functions: ClassVar[dict[type, str]] = printer_functions("torch_code")  # primitives table

    def where(self, cond: str, a: str, b: str) -> str:
        return f"torch.where({cond}, {a}, {b})"

    def minmax(self, kind: str, args: list[sympy.Expr]) -> str:
        consts = [a for a in args if a.is_number]
        exprs = [self.print(a) for a in args if not a.is_number]
        text = exprs[0]
        fn = "torch.minimum" if kind == "min" else "torch.maximum"
        for other in exprs[1:]:
            text = f"{fn}({text}, {other})"
        if consts:
            bound = self.number(float(consts[0]))
            text = f"torch.clamp({text}, {'max' if kind == 'min' else 'min'}={bound})"
        return text

    def sqrt(self, base: str) -> str:
        return f"torch.sqrt({base})"

    def general_pow(self, base: str, p: float) -> str:
        return f"torch.pow({base}, {p!r})"


class TritonPrinter(_Printer):
    """Triton from core ops only (see the module docstring for the dialect decision)."""

    functions: ClassVar[dict[type, str]] = printer_functions("triton")  # primitives table

    def call(self, func: type, arg: str) -> str:
        text = super().call(func, arg)
        name = self.functions[func]
        if name in TRITON_HELPERS:
            self.helpers.add(name)
            self.helpers.update(TRITON_HELPERS[name][1])
        return text

    def where(self, cond: str, a: str, b: str) -> str:
        return f"tl.where({cond}, {a}, {b})"

    def pair(self, kind: str, a: str, b: str) -> str:
        return f"{'tl.minimum' if kind == 'min' else 'tl.maximum'}({a}, {b})"

    def sqrt(self, base: str) -> str:
        return f"tl.sqrt({base})"

    def general_pow(self, base: str, p: float) -> str:
        return f"tl.exp({p!r} * tl.log({base}))"

    def helper_source(self) -> str:
        """Source of the helper functions this printer's output calls, in dependency order."""
        order = ["_log1p", "_sign", "_erfc", "_tanh", "_atan", "_asinh", "_sinh", "_cosh"]
        return "".join(TRITON_HELPERS[name][0]() for name in order if name in self.helpers)


def cse_lines(
    printer: _Printer,
    exprs: dict[str, sympy.Expr],
    indent: str = "    ",
    boolean_indent: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Common-subexpression elimination over ``exprs`` (name -> expression), then print.

    Returns the assignment lines for the shared temporaries ``t0, t1, ...`` and the printed
    right-hand side of each named output. A constant output is broadcast against ``u`` by the
    caller (the printers do not know the tensor shape). ``boolean_indent`` (C: a typed
    declaration) replaces ``indent`` for temporaries that hold a condition.
    """
    names = list(exprs)
    temps = sympy.numbered_symbols("t")
    replacements, reduced = sympy.cse([exprs[n] for n in names], symbols=temps)
    # Constants stay inline: the printers fold them into literals and need to see them as numbers
    # (torch.clamp bounds, Min/Max against a constant), so undo cse's naming of pure constants.
    constants: dict[sympy.Symbol, sympy.Expr] = {}
    kept = []
    for sym, value in replacements:
        value = value.xreplace(constants)
        if value.is_number:
            constants[sym] = value
        else:
            kept.append((sym, value))
    reduced = [r.xreplace(constants) for r in reduced]
    lines = [
        f"{_lead(value, indent, boolean_indent)}{sym.name} = {printer.print(value)}"
        for sym, value in kept
    ]
    return lines, {n: printer.print(r) for n, r in zip(names, reduced, strict=True)}


# ------------------------------------------------------------------------------------ C (CPU)
# The native CPU path (normfree.kernels._native) prints the same expression to C99 that gcc
# vectorises: every loop is ``#pragma omp simd`` and every function is either an inline helper
# below (branch-free selects, so the loop if-converts) or a glibc libmvec vector function
# (logf, sinf, cosf; declared ``simd`` so gcc calls their AVX2 variants). exp and erf are written
# here rather than taken from libmvec because they are the whole cost of the Derf operator on
# CPU: libmvec's accurate erff measured ~1.3 ns/element and expf ~1.1 on this machine's Zen 1
# cores, more than LayerNorm's entire step per element (bench/bench_kernels_cpu.py).
#
# - ``nf_exp``: Cody-Waite reduction x = n ln2 + r (|r| <= ln2/2, ln2 split in two constants),
#   the degree-6 Taylor polynomial of e^r (truncation <= 1.2e-7 relative, about one ulp), and
#   2^n built in the exponent bits. x < -86.6 flushes to 0 (true value < 2^-125), x > 88.72 is
#   inf, NaN propagates through the polynomial.
# - ``nf_erf``: one rational function on the clamped input, erf(x) ~ x P(x^2) / Q(x^2) with
#   |x| <= 3.925 (erf(3.925) rounds to 1 in fp32), P of degree 6 and Q of degree 5 in x^2. Two
#   polynomials and a division are cheaper than two branches plus an exp (both sides of a select
#   are evaluated in SIMD code). The coefficients are the literals below, produced by
#   :func:`erf_rational_fit` (linearised least squares with Lawson reweighting towards minimax);
#   the fit's error in float64 is 1.5e-9 and a test bounds the fp32 result by 4e-7 absolute.
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
ERF_CLAMP = 3.925


def erf_rational_fit(
    p_terms: int = len(ERF_P), q_terms: int = len(ERF_Q), iterations: int = 40
) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """Refit (P, Q, max float64 error) of erf(x) ~ x P(x^2) / Q(x^2), Q(0) = 1, on [0, clamp].

    Each iteration solves the linear problem x P - erf(x) (Q - 1) = erf(x) by weighted least
    squares on Chebyshev nodes; the weights 1/Q (and then sqrt|error|, Lawson's rule) move the
    solution towards the minimax rational function. The best iterate is returned. This is how
    :data:`ERF_P` / :data:`ERF_Q` were made; a test reruns it.
    """
    import math

    x = _chebyshev_nodes(0.0, ERF_CLAMP, 6000)
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


def _chebyshev_nodes(lo: float, hi: float, n: int = 4000) -> np.ndarray:
    return lo + (hi - lo) * 0.5 * (1.0 - np.cos(np.pi * (np.arange(n) + 0.5) / n))


def _c_horner(coefs: tuple[float, ...], var: str) -> str:
    text = f"{coefs[-1]!r}f"
    for c in reversed(coefs[:-1]):
        text = f"({text}) * {var} + {c!r}f"
    return text


def c_helpers() -> str:
    """C source of the inline helpers (always emitted: unused statics cost nothing)."""
    taylor = _c_horner(tuple(1.0 / float(np.prod(np.arange(1, k + 1))) for k in range(7)), "r")
    atan = _c_horner(atan_coefficients(), "s")
    return f"""
static inline float nf_bits(int32_t i) {{ float f; memcpy(&f, &i, sizeof f); return f; }}
static inline float nf_sign(float x) {{ return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x * 0.0f); }}
static inline float nf_exp(float x) {{
    float xc = x < -86.6f ? -86.6f : x;
    xc = xc > 88.72f ? 88.72f : xc;
    float n = (xc * 1.4426950408889634f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.4286068203094173e-06f;
    float p = {taylor};
    float y = (p * 2.0f) * nf_bits(((int32_t)n + 126) << 23); /* NaN: p is NaN */
    y = x < -86.6f ? 0.0f : y;
    return x > 88.72f ? INFINITY : y;
}}
static inline float nf_erf(float x) {{
    float xc = x < -{ERF_CLAMP!r}f ? -{ERF_CLAMP!r}f : x;
    xc = xc > {ERF_CLAMP!r}f ? {ERF_CLAMP!r}f : xc; /* NaN passes both tests unchanged */
    float s = xc * xc;
    return xc * ({_c_horner(ERF_P, "s")}) / ({_c_horner(ERF_Q, "s")});
}}
static inline float nf_erfc(float x) {{ return 1.0f - nf_erf(x); }}
static inline float nf_tanh(float x) {{
    float a = fabsf(x);
    float e = nf_exp(-2.0f * a);
    float big = (1.0f - e) / (1.0f + e);
    float s = a * a;
    float small = a * (1.0f + s * (-0.3333333333333333f
                       + s * (0.13333333333333333f + s * -0.05396825396825397f)));
    float r = a < 0.1f ? small : big;
    return x < 0.0f ? -r : r;
}}
static inline float nf_atan(float x) {{
    float a = fabsf(x);
    int big = a > 1.0f;
    float t = big ? 1.0f / (a > 1.0f ? a : 1.0f) : a;
    float s = t * t;
    float p = t * ({atan});
    float r = big ? 1.5707963267948966f - p : p;
    return x < 0.0f ? -r : r;
}}
static inline float nf_log1p(float t) {{
    float w = 1.0f + t;
    float d = w - 1.0f;
    return d == 0.0f ? t : logf(w) * (t / (d == 0.0f ? 1.0f : d));
}}
static inline float nf_asinh(float x) {{
    float a = fabsf(x);
    float s = a * a;
    float near = nf_log1p(a + s / (1.0f + sqrtf(1.0f + s)));
    float far = logf(a) + 0.6931471805599453f;
    float r = a > 268435456.0f ? far : near;
    return x < 0.0f ? -r : r;
}}
static inline float nf_sinh(float x) {{
    float a = fabsf(x);
    float e = nf_exp(a);
    float big = 0.5f * (e - 1.0f / e);
    float s = a * a;
    float small = a * (1.0f + s * (0.16666666666666666f + s * 0.008333333333333333f));
    float r = a < 0.1f ? small : big;
    return x < 0.0f ? -r : r;
}}
static inline float nf_cosh(float x) {{
    float e = nf_exp(fabsf(x));
    return 0.5f * (e + 1.0f / e);
}}
static inline float nf_pow(float x, float p) {{ return nf_exp(p * logf(x)); }}
"""


class CPrinter(_Printer):
    """C99 over ``float`` for the native CPU path (see :func:`c_helpers` for the functions)."""

    functions: ClassVar[dict[type, str]] = printer_functions("c")  # primitives table

    def number(self, value: float) -> str:
        if value != value:
            return "NAN"
        if value in (float("inf"), float("-inf")):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        return f"{value!r}f"

    def nan(self) -> str:
        return "NAN"

    def print(self, expr: sympy.Basic) -> str:
        number = getattr(expr, "is_number", False) and not isinstance(expr, sympy.Piecewise)
        if number and expr is not sympy.S.NaN:
            return self.number(float(expr))
        return super().print(expr)

    def where(self, cond: str, a: str, b: str) -> str:
        return f"({cond} ? {a} : {b})"

    def pair(self, kind: str, a: str, b: str) -> str:
        # a ternary, not fminf: a NaN in ``a`` must propagate, as torch.minimum/clamp propagate it
        return f"({b} {'<' if kind == 'min' else '>'} {a} ? {b} : {a})"

    def sqrt(self, base: str) -> str:
        return f"sqrtf({base})"

    def general_pow(self, base: str, p: float) -> str:
        return f"nf_pow({base}, {self.number(p)})"


def _lead(value: sympy.Basic, indent: str, boolean_indent: str | None) -> str:
    if boolean_indent is not None and isinstance(value, sympy.logic.boolalg.Boolean):
        return boolean_indent
    return indent
