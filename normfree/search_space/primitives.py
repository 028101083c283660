"""The one table of primitive functions: every function a kernel can compute, each one row.

A row says everything normfree knows about a primitive, for every consumer:

- the expression language: its name, its float for constant folding (``math``), whether it has a
  kink at 0 (``kink``: a branch point the parser counts and the derivative's kink search visits)
  and whether its argument must be positive (``domain``);
- sympy: the class of its node, or, for a function sympy does not have, the row's own
  ``derivative`` (a formula) and ``parity``, from which a sympy function is made;
- numeric evaluation: numpy/scipy (float64 grids), torch (tensors, and the torch printer), and
  mpmath (high-precision points; ``tails`` saturates arguments so large that mpmath would need
  astronomically large numbers, as exp(exp(exp(100))) would);
- the code the three printers emit (torch, Triton, C): a library function's name, or a
  :class:`Code` whose source the printer writes into the generated module, with the helpers it
  calls (``needs``, emitted first);
- the generative grammar's weight (``propose``, 0: never proposed), and what the tests run: an
  ``example`` formula and the fp32 ``accuracy`` every kernel backend must reach.

The parser's function table, the allowed node set, the numeric backends, the printers, the
grammar and the tests all read this table, and the kernel cache's key hashes this file, so a new
or changed primitive is one row here (docs/architecture.md, "How to extend normfree").

Dialects. Triton: core ops only (exp, log, sqrt, where, erf), so the same kernel source runs
compiled on a GPU and under ``TRITON_INTERPRET=1`` on CPU, where libdevice's tanh/atan/asinh do
not run. C: branch-free inline functions that gcc vectorises under ``#pragma omp simd``, or glibc
libmvec functions declared ``simd``. exp and erf are written out rather than taken from libmvec
because they are the whole cost of the Derf operator on CPU: libmvec's accurate erff and expf
cost more per element than LayerNorm's entire step (bench/bench_kernels_cpu.py). Helper code
reads its argument ``x``; a ``numpy``/``torch``/``mpmath`` helper is Python run with ``np``,
``torch`` or ``mp`` (and ``math``) in scope.

``Min``/``Max`` (n-ary, printed by nesting), ``Pow`` (by exponent) and ``Piecewise`` (by
``where``) are structural and stay special cases of each printer.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

Lib = Literal["numpy", "torch", "mpmath"]


@dataclass(frozen=True)
class Code:
    """A function a backend calls: ``name``, and the ``source`` defining it when the backend
    has no such function (text, or a function that writes it: fitted coefficients), with the
    helpers that source calls (``needs``)."""

    name: str
    source: str | Callable[[], str] = ""
    needs: tuple[Code, ...] = ()

    def text(self) -> str:
        return self.source() if callable(self.source) else self.source


def ordered(codes: Iterable[Code]) -> list[Code]:
    """``codes`` and every helper they need, each once, every helper before its callers."""
    out: list[Code] = []
    seen: set[str] = set()

    def visit(code: Code) -> None:
        if code.name in seen:
            return
        seen.add(code.name)
        for need in code.needs:
            visit(need)
        out.append(code)

    for code in sorted(codes, key=lambda c: c.name):
        visit(code)
    return out


@dataclass(frozen=True)
class Tails:
    """mpmath's value for arguments beyond ``+-beyond``: ``neg`` and ``pos`` (inf and nan
    allowed). Saturating functions stop there (exp(1e4) already overflows every float); sin
    and cos beyond 1e15 would need unbounded argument reduction and are undefined."""

    beyond: float
    neg: float
    pos: float


@dataclass(frozen=True)
class Accuracy:
    """What every fp32 kernel backend must reach on ``[lo, hi]`` (a dense grid plus
    log-spaced magnitudes): ``|got - want| <= atol + rtol * |want|`` against the float64
    numpy column."""

    lo: float = -10.0
    hi: float = 10.0
    atol: float = 2e-7
    rtol: float = 1e-6


@dataclass(frozen=True)
class Primitive:
    """One function of one argument and how every backend computes it (module docstring)."""

    name: str  # in formulas and in the grammar's text
    math: Callable[[float], float]  # a float, for the parser's constant folding
    numpy: str | Code  # "module.attr" (numpy, scipy.special) or Python over ``np``
    torch: str | Code  # "torch.attr": the torch printer's output and the tensor evaluator
    triton: str | Code
    c: str | Code
    mpmath: str | Code  # "mpmath.attr" or Python over ``mp``
    sympy_name: str = ""  # the sympy class ("" = ``name``); unused when ``derivative`` is set
    derivative: str = ""  # f'(u) for a function sympy lacks: the row then makes its sympy node
    parity: Literal["odd", "even", ""] = ""  # of a row-made node: f(-u) folds to -f(u) / f(u)
    tails: Tails | None = None
    kink: bool = False  # derivative jumps where the argument is 0 (abs, sign)
    domain: Literal["real", "positive"] = "real"  # "positive": finite only for arguments > 0
    propose: float = 0.0  # weight with which the generative grammar proposes it
    example: str = ""  # a formula of it the tests run ("" = "name(u)")
    accuracy: Accuracy = field(default_factory=Accuracy)

    @property
    def sympy(self) -> type:
        """The sympy class of the node. Resolved on use, not when the table loads: the parser's
        syntax pass reads names and floats from this table, and must not import sympy."""
        return _sympy_class(self.name)

    @property
    def formula(self) -> str:
        return self.example or f"{self.name}(u)"


# ---------------------------------------------------------------------------------- helpers
# Shared by several rows. Triton: ``@triton.jit`` device functions; C: static inline float.

_LIBMVEC = """#if defined(__x86_64__)
float NAME(float) __attribute__((simd("notinbranch"))); /* libmvec: vectorisable calls */
#endif
"""


def _libmvec(name: str) -> Code:
    return Code(name, _LIBMVEC.replace("NAME", name))


C_LOGF, C_SINF, C_COSF = _libmvec("logf"), _libmvec("sinf"), _libmvec("cosf")

C_BITS = Code(
    "nf_bits",
    "static inline float nf_bits(int32_t i) { float f; memcpy(&f, &i, sizeof f); return f; }\n",
)


def _c_exp() -> str:
    from normfree.search_space._fits import exp_taylor, horner

    # Cody-Waite reduction x = n ln2 + r (ln2 in two parts), Taylor of e^r to degree 6 (about
    # one ulp), 2^n built in the exponent bits; below -86.6 the true value is < 2^-125: 0.
    return """static inline float nf_exp(float x) {
    float xc = x < -86.6f ? -86.6f : x;
    xc = xc > 88.72f ? 88.72f : xc;
    float n = (xc * 1.4426950408889634f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.4286068203094173e-06f;
    float p = POLY;
    float y = (p * 2.0f) * nf_bits(((int32_t)n + 126) << 23); /* NaN: p is NaN */
    y = x < -86.6f ? 0.0f : y;
    return x > 88.72f ? INFINITY : y;
}
""".replace("POLY", horner(exp_taylor(), "r", "f"))


C_EXP = Code("nf_exp", _c_exp, (C_BITS,))


def _c_erf() -> str:
    from normfree.search_space._fits import ERF_CLAMP, ERF_P, ERF_Q, horner

    clamp = f"{ERF_CLAMP!r}f"
    return f"""static inline float nf_erf(float x) {{
    float xc = x < -{clamp} ? -{clamp} : x;
    xc = xc > {clamp} ? {clamp} : xc; /* NaN passes both tests unchanged */
    float s = xc * xc;
    return xc * ({horner(ERF_P, "s", "f")}) / ({horner(ERF_Q, "s", "f")});
}}
"""


C_ERF = Code("nf_erf", _c_erf)

# Goldberg: log(1 + t) with the rounding of (1 + t) compensated; exact for tiny t.
TRITON_LOG1P = Code(
    "_log1p",
    """@triton.jit
def _log1p(x):
    w = 1.0 + x
    d = w - 1.0
    return tl.where(d == 0.0, x, tl.log(w) * (x / tl.where(d == 0.0, 1.0, d)))
""",
)
C_LOG1P = Code(
    "nf_log1p",
    """static inline float nf_log1p(float x) {
    float w = 1.0f + x;
    float d = w - 1.0f;
    return d == 0.0f ? x : logf(w) * (x / (d == 0.0f ? 1.0f : d));
}
""",
    (C_LOGF,),
)


def _atan(dialect: Literal["triton", "c"]) -> str:
    """Range reduction to [0, 1] (atan(x) = pi/2 - atan(1/x) above 1, odd symmetry), then the
    fitted odd polynomial t * P(t^2) of :mod:`._fits`."""
    from normfree.search_space._fits import atan_coefficients, horner

    if dialect == "c":
        return f"""static inline float nf_atan(float x) {{
    float a = fabsf(x);
    int big = a > 1.0f;
    float t = big ? 1.0f / (a > 1.0f ? a : 1.0f) : a;
    float s = t * t;
    float p = t * ({horner(atan_coefficients(), "s", "f")});
    float r = big ? 1.5707963267948966f - p : p;
    return x < 0.0f ? -r : r;
}}
"""
    return f"""@triton.jit
def _atan(x):
    a = tl.abs(x)
    big = a > 1.0
    t = tl.where(big, 1.0 / tl.maximum(a, 1.0), a)
    s = t * t
    p = t * ({horner(atan_coefficients(), "s")})
    r = tl.where(big, 1.5707963267948966 - p, p)
    return tl.where(x < 0.0, -r, r)
"""


def _sign(v: float) -> float:
    return float((v > 0) - (v < 0))


# ------------------------------------------------------------------------------------- rows
PRIMITIVES: tuple[Primitive, ...] = (
    Primitive(
        "erf", math=math.erf, numpy="scipy.special.erf", torch="torch.erf",
        triton="tl.math.erf", c=C_ERF, mpmath="mpmath.erf", tails=Tails(1e4, -1.0, 1.0),
        propose=1.5, accuracy=Accuracy(-8, 8, atol=4e-7, rtol=0),
    ),
    Primitive(
        # 1 - erf: absolute error ~1e-7; relative accuracy is lost only where erfc < 1e-7
        "erfc", math=math.erfc, numpy="scipy.special.erfc", torch="torch.erfc",
        triton=Code("_erfc", "@triton.jit\ndef _erfc(x):\n    return 1.0 - tl.math.erf(x)\n"),
        c=Code("nf_erfc", "static inline float nf_erfc(float x) { return 1.0f - nf_erf(x); }\n",
               (C_ERF,)),
        mpmath="mpmath.erfc", tails=Tails(1e4, 2.0, 0.0),
        accuracy=Accuracy(-8, 8, atol=4e-7, rtol=0),
    ),
    Primitive(
        # sign(x) (1 - e) / (1 + e), e = exp(-2|x|) (never overflows), Taylor to x^7 below 0.1
        # (next term 2e-11 relative) so small inputs keep their relative accuracy
        "tanh", math=math.tanh, numpy="numpy.tanh", torch="torch.tanh",
        triton=Code("_tanh", """@triton.jit
def _tanh(x):
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    big = (1.0 - e) / (1.0 + e)
    s = a * a
    small = a * (1.0 + s * (-0.3333333333333333
                            + s * (0.13333333333333333 + s * -0.05396825396825397)))
    r = tl.where(a < 0.1, small, big)
    return tl.where(x < 0.0, -r, r)
"""),
        c=Code("nf_tanh", """static inline float nf_tanh(float x) {
    float a = fabsf(x);
    float e = nf_exp(-2.0f * a);
    float big = (1.0f - e) / (1.0f + e);
    float s = a * a;
    float small = a * (1.0f + s * (-0.3333333333333333f
                       + s * (0.13333333333333333f + s * -0.05396825396825397f)));
    float r = a < 0.1f ? small : big;
    return x < 0.0f ? -r : r;
}
""", (C_EXP,)),
        mpmath="mpmath.tanh", tails=Tails(1e4, -1.0, 1.0), propose=1.5,
        accuracy=Accuracy(-30, 30),
    ),
    Primitive(
        "atan", math=math.atan, numpy="numpy.arctan", torch="torch.atan",
        triton=Code("_atan", lambda: _atan("triton")), c=Code("nf_atan", lambda: _atan("c")),
        mpmath="mpmath.atan", propose=1.0, accuracy=Accuracy(-1e6, 1e6, rtol=0),
    ),
    Primitive(
        # sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), and log(2|x|) above 2^28 where x^2
        # would overflow; odd symmetry gives large negative inputs the same accuracy
        "asinh", math=math.asinh, numpy="numpy.arcsinh", torch="torch.asinh",
        triton=Code("_asinh", """@triton.jit
def _asinh(x):
    a = tl.abs(x)
    s = a * a
    near = _log1p(a + s / (1.0 + tl.sqrt(1.0 + s)))
    far = tl.log(a) + 0.6931471805599453
    r = tl.where(a > 268435456.0, far, near)
    return tl.where(x < 0.0, -r, r)
""", (TRITON_LOG1P,)),
        c=Code("nf_asinh", """static inline float nf_asinh(float x) {
    float a = fabsf(x);
    float s = a * a;
    float near = nf_log1p(a + s / (1.0f + sqrtf(1.0f + s)));
    float far = logf(a) + 0.6931471805599453f;
    float r = a > 268435456.0f ? far : near;
    return x < 0.0f ? -r : r;
}
""", (C_LOG1P, C_LOGF)),
        mpmath="mpmath.asinh", propose=1.0, accuracy=Accuracy(-1e30, 1e30, atol=0),
    ),
    Primitive(
        # from exp, with a Taylor branch below |x| < 0.1
        "sinh", math=math.sinh, numpy="numpy.sinh", torch="torch.sinh",
        triton=Code("_sinh", """@triton.jit
def _sinh(x):
    a = tl.abs(x)
    e = tl.exp(a)
    big = 0.5 * (e - 1.0 / e)
    s = a * a
    small = a * (1.0 + s * (0.16666666666666666 + s * 0.008333333333333333))
    r = tl.where(a < 0.1, small, big)
    return tl.where(x < 0.0, -r, r)
"""),
        c=Code("nf_sinh", """static inline float nf_sinh(float x) {
    float a = fabsf(x);
    float e = nf_exp(a);
    float big = 0.5f * (e - 1.0f / e);
    float s = a * a;
    float small = a * (1.0f + s * (0.16666666666666666f + s * 0.008333333333333333f));
    float r = a < 0.1f ? small : big;
    return x < 0.0f ? -r : r;
}
""", (C_EXP,)),
        mpmath="mpmath.sinh", tails=Tails(1e4, -math.inf, math.inf),
        accuracy=Accuracy(-80, 80, atol=0),
    ),
    Primitive(
        "cosh", math=math.cosh, numpy="numpy.cosh", torch="torch.cosh",
        triton=Code("_cosh", """@triton.jit
def _cosh(x):
    e = tl.exp(tl.abs(x))
    return 0.5 * (e + 1.0 / e)
"""),
        c=Code("nf_cosh", """static inline float nf_cosh(float x) {
    float e = nf_exp(fabsf(x));
    return 0.5f * (e + 1.0f / e);
}
""", (C_EXP,)),
        mpmath="mpmath.cosh", tails=Tails(1e4, math.inf, math.inf),
        accuracy=Accuracy(-80, 80, atol=0),
    ),
    Primitive(
        "sin", math=math.sin, numpy="numpy.sin", torch="torch.sin", triton="tl.sin",
        c=C_SINF, mpmath="mpmath.sin", tails=Tails(1e15, math.nan, math.nan), propose=0.5,
    ),
    Primitive(
        "cos", math=math.cos, numpy="numpy.cos", torch="torch.cos", triton="tl.cos",
        c=C_COSF, mpmath="mpmath.cos", tails=Tails(1e15, math.nan, math.nan),
    ),
    Primitive(
        "exp", math=math.exp, numpy="numpy.exp", torch="torch.exp", triton="tl.exp", c=C_EXP,
        mpmath="mpmath.exp", tails=Tails(1e4, 0.0, math.inf), propose=0.5,
        accuracy=Accuracy(-80, 80, atol=0, rtol=3e-7),
    ),
    Primitive(
        "log", math=math.log, numpy="numpy.log", torch="torch.log", triton="tl.log", c=C_LOGF,
        mpmath="mpmath.log", domain="positive", example="log(abs(u) + 1)",
        accuracy=Accuracy(1e-30, 1e30),
    ),
    Primitive(
        "abs", math=abs, numpy="numpy.abs", torch="torch.abs", triton="tl.abs", c="fabsf",
        mpmath="mpmath.fabs", sympy_name="Abs", kink=True, propose=0.7,
    ),
    Primitive(
        # sign(0) = 0 (science.md); NaN stays NaN through x * 0
        "sign", math=_sign, numpy="numpy.sign", torch="torch.sign",
        triton=Code("_sign", """@triton.jit
def _sign(x):
    return tl.where(x > 0.0, 1.0, tl.where(x < 0.0, -1.0, x * 0.0))
"""),
        c=Code("nf_sign", "static inline float nf_sign(float x) "
               "{ return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x * 0.0f); }\n"),
        mpmath="mpmath.sign", kink=True, propose=0.5,
    ),
)  # fmt: skip
BY_NAME: dict[str, Primitive] = {p.name: p for p in PRIMITIVES}
assert len(BY_NAME) == len(PRIMITIVES), "one row per name"


# --------------------------------------------------------------------------- derived tables
class _RowFunctions:
    """The sympy functions rows define, as attributes (``sympy_functions.softplus``): where
    pickle finds a row-made class (its ``__qualname__``), made on first access."""

    def __getattr__(self, name: str) -> type:
        row = BY_NAME.get(name)
        if row is None or not row.derivative:
            raise AttributeError(name)
        return _sympy_class(name)


sympy_functions = _RowFunctions()


@cache
def _sympy_class(name: str) -> type:
    import sympy

    row = BY_NAME[name]
    if not row.derivative:
        return getattr(sympy, row.sympy_name or row.name)

    def fdiff(self: Any, argindex: int = 1) -> Any:
        from normfree.search_space._parser import U, parse_expr_text

        return parse_expr_text(row.derivative).xreplace({U: self.args[0]})

    def eval(cls: type, arg: Any) -> Any:
        if row.parity and arg.could_extract_minus_sign():
            return -cls(-arg) if row.parity == "odd" else cls(-arg)
        return None

    cls = type(
        name,
        (sympy.Function,),
        {
            "__module__": __name__,
            "__qualname__": f"sympy_functions.{name}",
            "fdiff": fdiff,
            "eval": classmethod(eval),
            "_eval_mpmath": lambda self: (mp_function(row), self.args),
            "_eval_is_real": lambda self: self.args[0].is_real,
            "_eval_is_finite": lambda self: self.args[0].is_finite,
        },
    )
    return cls


@cache
def by_sympy() -> dict[type, Primitive]:
    """``{sympy class: primitive}`` (a function: building it imports sympy)."""
    return {p.sympy: p for p in PRIMITIVES}


def heads(where: Callable[[Primitive], bool] = lambda p: True) -> tuple[type, ...]:
    """The sympy classes of the rows ``where`` selects (``heads(lambda p: p.kink)``)."""
    return tuple(p.sympy for p in PRIMITIVES if where(p))


def minmax() -> tuple[type, ...]:
    """The n-ary heads every backend prints by nesting two-argument min/max."""
    import sympy

    return (sympy.Min, sympy.Max)


def printer_functions(column: Literal["torch", "triton", "c"]) -> dict[type, str | Code]:
    """``{sympy class: code}`` of one printer's column."""
    return {p.sympy: getattr(p, column) for p in PRIMITIVES}


_SCOPES: dict[Lib, tuple[str, str]] = {"numpy": ("np", "numpy"), "torch": ("torch", "torch"),
                                       "mpmath": ("mp", "mpmath")}  # fmt: skip


def python_function(column: str | Code, lib: Lib) -> Callable[..., Any]:
    """The callable a ``numpy``/``torch``/``mpmath`` column names or defines.

    A dotted path whose module is not loaded yet (``scipy.special.erf``) is imported on the
    first call: scipy costs a quick CLI command 0.3-0.5 s and most formulas have no erf. A
    :class:`Code` runs (with its helpers) in a scope holding its library and ``math``.
    """
    if isinstance(column, Code):
        alias, module = _SCOPES[lib]
        lib_module = importlib.import_module(module)
        scope: dict[str, Any] = {alias: lib_module.mp if lib == "mpmath" else lib_module}
        scope["math"] = math
        for code in ordered([column]):
            exec(compile(code.text(), f"<{lib} {code.name}>", "exec"), scope)
        return scope[column.name]
    module, _, attr = column.rpartition(".")
    if module in sys.modules:
        return getattr(sys.modules[module], attr)
    loaded: list[Callable[..., Any]] = []

    def call(*args: Any) -> Any:
        if not loaded:
            loaded.append(getattr(importlib.import_module(module), attr))
        return loaded[0](*args)

    call.__name__ = attr
    return call


@cache
def mp_function(row: Primitive) -> Callable[[Any], Any]:
    """The row's mpmath function (its tails applied by the caller, :mod:`._numeric`)."""
    return python_function(row.mpmath, "mpmath")


__all__ = [
    "BY_NAME",
    "PRIMITIVES",
    "Accuracy",
    "Code",
    "Primitive",
    "Tails",
    "by_sympy",
    "heads",
    "minmax",
    "mp_function",
    "ordered",
    "printer_functions",
    "python_function",
    "sympy_functions",
]
