"""Printers: one sympy expression and its derivative -> torch, Triton or C source.

A printer is a table of known functions plus a few special cases (``Pow``, ``Piecewise``, ``Min``/
``Max``, numbers), in the manner of sympy's own code printers, but written for the closed node set
that ``search_space`` guarantees (numbers, Add, Mul, Pow with a constant exponent, Min, Max,
Piecewise over relations/And/Or/Not, and the primitives of ``search_space.primitives``). Anything
else raises :class:`PrinterError` instead of printing something approximate.

The functions come from the primitives table, one column per printer: a library call
(``torch.erf``, ``tl.exp``, ``fabsf``) or a :class:`~normfree.search_space.primitives.Code`
helper, which the printer collects as it prints and :meth:`_Printer.helper_source` writes out,
every helper after the helpers it calls. The dialect decisions (Triton from core ops only, C
branch-free and vectorisable) are stated with the table.

``f`` and ``f'`` go through one :func:`sympy.cse` call, so the shared work (``tanh(u)`` in
``1 - tanh(u)**2``, ``abs(u)``, ...) is computed once when both are needed (the backward kernel).

``Pow``: integer exponents by repeated multiplication (negative: one division); half-integers by
``sqrt``; any other constant ``p`` by ``exp(p * log(x))``. For ``x = 0`` that is 0 when p > 0 and
inf when p < 0 (log(0) = -inf), and NaN for x < 0, the same as ``torch.pow`` (the catalog writes
odd powers as ``sign(u) * abs(u)**p``).
"""

from __future__ import annotations

from typing import ClassVar

import sympy

from normfree.search_space.primitives import C_EXP, C_LOGF, Code, ordered, printer_functions

__all__ = [
    "CPrinter",
    "PrinterError",
    "TorchPrinter",
    "TritonPrinter",
    "cse_lines",
]


class PrinterError(ValueError):
    """An expression outside the node set the printers know."""


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

    functions: ClassVar[dict[type, str | Code]] = {}

    def __init__(self, variable: sympy.Symbol) -> None:
        self.variable = variable
        self.helpers: set[Code] = set()

    # -- dialect hooks -------------------------------------------------------------------
    def number(self, value: float) -> str:
        return repr(float(value))

    def call(self, func: type, arg: str) -> str:
        try:
            code = self.functions[func]
        except KeyError:
            raise PrinterError(f"no {type(self).__name__} rule for {func.__name__}") from None
        return f"{self.use(code)}({arg})"

    def use(self, code: str | Code) -> str:
        """The name to call for ``code``, noting a helper whose source must be written out."""
        if isinstance(code, str):
            return code
        if code.text():
            self.helpers.add(code)
        else:
            self.helpers.update(code.needs)
        return code.name

    def helper_source(self) -> str:
        """Source of the helpers this printer's output calls, each after those it calls."""
        texts = [code.text().rstrip("\n") for code in ordered(self.helpers) if code.text()]
        return "\n\n".join(texts) + "\n" if texts else ""

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

    functions: ClassVar[dict[type, str | Code]] = printer_functions("torch")

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

    functions: ClassVar[dict[type, str | Code]] = printer_functions("triton")

    def where(self, cond: str, a: str, b: str) -> str:
        return f"tl.where({cond}, {a}, {b})"

    def pair(self, kind: str, a: str, b: str) -> str:
        return f"{'tl.minimum' if kind == 'min' else 'tl.maximum'}({a}, {b})"

    def sqrt(self, base: str) -> str:
        return f"tl.sqrt({base})"

    def general_pow(self, base: str, p: float) -> str:
        return f"tl.exp({p!r} * tl.log({base}))"


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
# vectorises: every loop is ``#pragma omp simd`` and every function is an inline helper of the
# primitives table (branch-free selects, so the loop if-converts) or a libmvec vector function.
# A general power is exp(p * log(x)) through the table's exp and log.
C_POW = Code(
    "nf_pow",
    "static inline float nf_pow(float x, float p) { return nf_exp(p * logf(x)); }\n",
    (C_EXP, C_LOGF),
)


class CPrinter(_Printer):
    """C99 over ``float`` for the native CPU path."""

    functions: ClassVar[dict[type, str | Code]] = printer_functions("c")

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
        return f"{self.use(C_POW)}({base}, {self.number(p)})"


def _lead(value: sympy.Basic, indent: str, boolean_indent: str | None) -> str:
    if boolean_indent is not None and isinstance(value, sympy.logic.boolalg.Boolean):
        return boolean_indent
    return indent
