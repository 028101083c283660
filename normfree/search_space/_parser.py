"""The expression language: a tokenizer and a recursive-descent parser that build sympy directly.

Why our own parser: user text must never reach ``eval``/``exec``/``sympify``, and a hand-written
parser lets us bound every resource (length, tokens, node count, nesting depth) *before* any
work is done, and point at the exact character that went wrong.

Grammar (precedence low to high; ``**``/``^`` is right-associative and binds tighter than unary
minus, as in Python, so ``-u**2`` is ``-(u**2)``)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("-" | "+") unary | power
    power  := atom (("**" | "^") unary)?
    atom   := NUMBER | "u" | "x" | "pi" | "e" | NAME "(" expr ("," expr)* ")" | "(" expr ")"

Every node is built with sympy constructors. Functions outside the kernel node set (sigmoid,
softsign, clip, expm1, log1p, min, max, ...) are rewritten here into that set, so nothing
downstream ever sees them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import sympy

from normfree.search_space.cost import MAX_SWITCHES
from normfree.search_space.errors import ExpressionError
from normfree.search_space.primitives import BY_NAME, PRIMITIVES

U = sympy.Symbol("u", real=True)

# Limits. Each one bounds a resource an attacker (or a typo) could otherwise exhaust.
MAX_LENGTH = 1000  # characters of formula text
MAX_NODES = 300  # numbers, names, operators and calls in the parse tree
MAX_DEPTH = 40  # nesting of parentheses, calls, unary signs and exponents
MAX_CONSTANT = 1e6  # magnitude of any literal or constant sub-expression
MIN_CONSTANT = 1e-12  # smallest magnitude of a non-zero constant (1e-320 is a typo or an attack)
MAX_CONSTANT_BITS = 4096  # size of an exact rational constant (((1/3)**32)**32 ... explodes)
MAX_EXPONENT = 32  # magnitude of a constant exponent
MAX_ARGS = 8  # arguments of min/max

# Branch points each call adds (see search_space.cost.MAX_SWITCHES): min/max count their
# arguments, clip its two bounds, the rest one switch each.
_SWITCHES = {"abs": 1, "sign": 1, "cbrt": 1, "softsign": 1, "relu": 1, "clip": 2, "clamp": 2}


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "name", "op", "end"
    text: str
    pos: int


_OPS = ("**", "+", "-", "*", "/", "^", "(", ")", ",")


def _digit(ch: str) -> bool:
    return "0" <= ch <= "9"  # ASCII only: str.isdigit() also accepts '²' and other scripts


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens; anything that is not part of the language is an error here."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if _digit(ch) or (ch == "." and i + 1 < n and _digit(text[i + 1])):
            j = i
            while j < n and _digit(text[j]):
                j += 1
            if j < n and text[j] == ".":
                j += 1
                while j < n and _digit(text[j]):
                    j += 1
            # Scientific notation only when an exponent digit follows: "2e" stays 2 then e.
            if j < n and text[j] in "eE":
                k = j + 1
                if k < n and text[k] in "+-":
                    k += 1
                if k < n and _digit(text[k]):
                    while k < n and _digit(text[k]):
                        k += 1
                    j = k
            if j < n and (text[j].isalpha() or text[j] == "_"):
                raise ExpressionError(
                    f"a number cannot be followed directly by {text[j]!r}; write '*' to multiply",
                    j,
                )
            tokens.append(Token("num", text[i:j], i))
            i = j
            continue
        if ch.isascii() and (ch.isalpha() or ch == "_"):
            j = i
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            tokens.append(Token("name", text[i:j], i))
            i = j
            continue
        for op in _OPS:
            if text.startswith(op, i):
                tokens.append(Token("op", op, i))
                i += len(op)
                break
        else:
            if ch == ".":
                reason = "attribute access is not allowed"
            elif ch in "'\"":
                reason = "strings are not allowed"
            elif ch in "[]{}":
                reason = "lists, sets, dicts and comprehensions are not allowed"
            elif ch in "=<>!":
                reason = "comparisons and assignments are not allowed"
            else:
                reason = f"unexpected character {ch!r}"
            raise ExpressionError(reason, i)
    tokens.append(Token("end", "", n))
    return tokens


# ---- the function table: name -> (min args, max args, builder) ---------------------------------

Builder = Callable[..., sympy.Expr]


def _clip(v: sympy.Expr, lo: sympy.Expr | None = None, hi: sympy.Expr | None = None):
    lo = sympy.S.NegativeOne if lo is None else lo
    hi = sympy.S.One if hi is None else hi
    return sympy.Min(sympy.Max(v, lo), hi)


def _sigmoid(v: sympy.Expr) -> sympy.Expr:
    # 1/(1+exp(-v)) == (1 + tanh(v/2))/2. The tanh form never overflows and makes
    # 2*sigmoid(2u) - 1 collapse to tanh(u) by sympy's automatic simplification.
    return (1 + sympy.tanh(v / 2)) / 2


_HALF = sympy.Rational(1, 2)

# Other names of primitives (``search_space.primitives``): numpy's and the papers' spellings.
ALIASES = {"arctan": "atan", "arcsinh": "asinh", "ln": "log"}

FUNCTIONS: dict[str, tuple[int, int, Builder]] = {
    # the primitives, one sympy node each, and their aliases
    **{p.name: (1, 1, p.sympy) for p in PRIMITIVES},
    **{alias: (1, 1, BY_NAME[name].sympy) for alias, name in ALIASES.items()},
    # functions the language spells with the primitives
    "sigmoid": (1, 1, _sigmoid),
    "expm1": (1, 1, lambda v: sympy.exp(v) - 1),
    "log1p": (1, 1, lambda v: sympy.log(1 + v)),
    "sqrt": (1, 1, lambda v: sympy.Pow(v, _HALF)),
    # Real cube root (sympy's Pow(v, 1/3) is complex for v < 0).
    "cbrt": (1, 1, lambda v: sympy.sign(v) * sympy.Pow(sympy.Abs(v), sympy.Rational(1, 3))),
    # clip(v) clips to [-1, 1] as in science.md; clip(v, lo, hi) to [lo, hi].
    "clip": (1, 3, _clip),
    "clamp": (1, 3, _clip),
    "min": (2, MAX_ARGS, sympy.Min),
    "max": (2, MAX_ARGS, sympy.Max),
    "softsign": (1, 1, lambda v: v / (1 + sympy.Abs(v))),
    "relu": (1, 1, lambda v: sympy.Max(v, 0)),
    "silu": (1, 1, lambda v: v * _sigmoid(v)),
    "gelu": (1, 1, lambda v: v * (1 + sympy.erf(v / sympy.sqrt(2))) / 2),
}

CONSTANTS: dict[str, sympy.Expr] = {"pi": sympy.pi, "e": sympy.E}
VARIABLES = ("u", "x")

# Floats of the constant functions, used to bound constant sub-expressions *before* sympy
# builds them (so 999999**32 is refused without sympy ever computing it).
_FLOAT_FUNCS: dict[str, Callable[..., float]] = {
    **{p.name: p.math for p in PRIMITIVES},
    **{alias: BY_NAME[name].math for alias, name in ALIASES.items()},
    "sigmoid": lambda v: 0.5 * (1 + math.tanh(v / 2)),
    "expm1": math.expm1,
    "log1p": math.log1p,
    "sqrt": math.sqrt,
    "cbrt": lambda v: math.copysign(abs(v) ** (1 / 3), v),
    "clip": lambda v, lo=-1.0, hi=1.0: min(max(v, lo), hi),
    "clamp": lambda v, lo=-1.0, hi=1.0: min(max(v, lo), hi),
    "min": min,
    "max": max,
    "softsign": lambda v: v / (1 + abs(v)),
    "relu": lambda v: max(v, 0.0),
    "silu": lambda v: v * 0.5 * (1 + math.tanh(v / 2)),
    "gelu": lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2,
}
assert set(_FLOAT_FUNCS) == set(FUNCTIONS), "every function folds to a float"


@dataclass(frozen=True)
class _Node:
    """A built sub-expression plus its float value when it is constant (else None)."""

    expr: sympy.Expr
    value: float | None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.nodes = 0
        self.switches = 0

    # -- bookkeeping --------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> Token:
        if self.tok.kind == "op" and self.tok.text == text:
            return self.advance()
        found = "end of input" if self.tok.kind == "end" else repr(self.tok.text)
        raise ExpressionError(f"expected {text!r}, found {found}", self.tok.pos)

    def count(self, pos: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ExpressionError(f"formula too large: more than {MAX_NODES} nodes", pos)

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"formula nested too deeply: more than {MAX_DEPTH} levels", pos)

    def leave(self) -> None:
        self.depth -= 1

    def constant(self, value: float | None, pos: int, what: str) -> float | None:
        """Bound a constant sub-expression's magnitude; None passes (not constant)."""
        if value is None:
            return None
        if math.isnan(value) or math.isinf(value) or abs(value) > MAX_CONSTANT:
            raise ExpressionError(
                f"{what} is too large or undefined: constants must lie within ±{MAX_CONSTANT:g}",
                pos,
            )
        if value != 0 and abs(value) < MIN_CONSTANT:
            raise ExpressionError(
                f"{what} is too small: non-zero constants must have magnitude >= {MIN_CONSTANT:g}",
                pos,
            )
        return value

    # -- grammar ------------------------------------------------------------------------------
    def parse(self) -> sympy.Expr:
        node = self.expr()
        if self.tok.kind != "end":
            raise ExpressionError(f"unexpected {self.tok.text!r}", self.tok.pos)
        return node.expr

    def expr(self) -> _Node:
        self.enter(self.tok.pos)
        left = self.term()
        while self.tok.kind == "op" and self.tok.text in "+-":
            op = self.advance()
            self.count(op.pos)
            right = self.term()
            value = None
            if left.value is not None and right.value is not None:
                value = left.value + right.value if op.text == "+" else left.value - right.value
            self.constant(value, op.pos, "constant")
            e = left.expr + right.expr if op.text == "+" else left.expr - right.expr
            left = _Node(e, value)
        self.leave()
        return left

    def term(self) -> _Node:
        left = self.unary()
        while self.tok.kind == "op" and self.tok.text in "*/":
            op = self.advance()
            self.count(op.pos)
            right = self.unary()
            value = None
            if op.text == "/":
                if right.value == 0 or right.expr.is_zero:
                    raise ExpressionError("division by zero", op.pos)
                if left.value is not None and right.value is not None:
                    value = left.value / right.value
                e = left.expr / right.expr
            else:
                if left.value is not None and right.value is not None:
                    value = left.value * right.value
                e = left.expr * right.expr
            self.constant(value, op.pos, "constant")
            left = _Node(e, value)
        return left

    def unary(self) -> _Node:
        if self.tok.kind == "op" and self.tok.text in "+-":
            op = self.advance()
            self.count(op.pos)
            self.enter(op.pos)
            inner = self.unary()
            self.leave()
            if op.text == "+":
                return inner
            return _Node(-inner.expr, None if inner.value is None else -inner.value)
        return self.power()

    def power(self) -> _Node:
        base = self.atom()
        if self.tok.kind == "op" and self.tok.text in ("**", "^"):
            op = self.advance()
            self.count(op.pos)
            self.enter(op.pos)
            exponent = self.unary()
            self.leave()
            return self.make_pow(base, exponent, op.pos)
        return base

    def make_pow(self, base: _Node, exponent: _Node, pos: int) -> _Node:
        if exponent.value is None:
            if base.value is not None and base.value > 0:
                # c**g(u) with a positive constant c is exp(g(u)*log(c)): kernel-safe.
                if base.expr == sympy.E:
                    return _Node(sympy.exp(exponent.expr), None)
                return _Node(sympy.exp(exponent.expr * sympy.log(base.expr)), None)
            raise ExpressionError(
                "the exponent must be a constant (for a variable exponent write "
                "exp(g*log(abs(b)+1)) or similar)",
                pos,
            )
        if abs(exponent.value) > MAX_EXPONENT:
            raise ExpressionError(f"exponent too large: |exponent| must be <= {MAX_EXPONENT}", pos)
        value = None
        if base.value is not None:
            try:
                raw = base.value**exponent.value
            except (OverflowError, ZeroDivisionError):
                raise ExpressionError("constant power is too large or undefined", pos) from None
            if isinstance(raw, complex):
                raise ExpressionError("constant power is not real", pos)
            value = float(raw)
            self.constant(value, pos, "constant power")
            if isinstance(base.expr, sympy.Rational) and isinstance(exponent.expr, sympy.Integer):
                bits = abs(base.expr.p).bit_length() + base.expr.q.bit_length()
                if bits * abs(int(exponent.expr)) > MAX_CONSTANT_BITS:
                    raise ExpressionError(
                        "constant power needs too much precision to keep exactly", pos
                    )
        if base.expr == sympy.E:
            return _Node(sympy.exp(exponent.expr), value)
        return _Node(sympy.Pow(base.expr, exponent.expr), value)

    def atom(self) -> _Node:
        t = self.tok
        if t.kind == "num":
            self.advance()
            self.count(t.pos)
            try:
                frac = Fraction(t.text)
            except (ValueError, ZeroDivisionError):
                raise ExpressionError(f"malformed number {t.text!r}", t.pos) from None
            if abs(frac) > MAX_CONSTANT:
                raise ExpressionError(
                    f"number too large: constants must lie within ±{MAX_CONSTANT:g}", t.pos
                )
            if frac != 0 and abs(frac) < MIN_CONSTANT:
                raise ExpressionError(
                    f"number too small: non-zero constants must be >= {MIN_CONSTANT:g}", t.pos
                )
            # Exact rationals keep canonical forms exact (2.72 -> 68/25).
            return _Node(sympy.Rational(frac.numerator, frac.denominator), float(frac))
        if t.kind == "op" and t.text == "(":
            self.advance()
            inner = self.expr()
            self.expect(")")
            return inner
        if t.kind == "name":
            self.advance()
            self.count(t.pos)
            name = t.text
            if self.tok.kind == "op" and self.tok.text == "(":
                return self.call(t)
            if name in VARIABLES:
                return _Node(U, None)
            if name in CONSTANTS:
                return _Node(CONSTANTS[name], float(CONSTANTS[name]))
            if name in FUNCTIONS:
                raise ExpressionError(f"function {name!r} must be called, e.g. {name}(u)", t.pos)
            raise ExpressionError(
                f"unknown name {name!r}: use u (or x), pi, e and the functions "
                f"{', '.join(sorted(FUNCTIONS))}",
                t.pos,
            )
        if t.kind == "end":
            raise ExpressionError("unexpected end of formula", t.pos)
        raise ExpressionError(f"unexpected {t.text!r}", t.pos)

    def call(self, name_tok: Token) -> _Node:
        name = name_tok.text
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"unknown function {name!r}: allowed are {', '.join(sorted(FUNCTIONS))}",
                name_tok.pos,
            )
        lo, hi, builder = FUNCTIONS[name]
        self.expect("(")
        self.enter(name_tok.pos)
        args = [self.expr()]
        while self.tok.kind == "op" and self.tok.text == ",":
            comma = self.advance()
            if len(args) >= hi:
                raise ExpressionError(f"{name}() takes at most {hi} argument(s)", comma.pos)
            args.append(self.expr())
        self.expect(")")
        self.leave()
        if len(args) < lo:
            raise ExpressionError(f"{name}() takes at least {lo} argument(s)", name_tok.pos)
        if name in ("clip", "clamp"):
            if len(args) == 2:
                raise ExpressionError(
                    f"{name}() takes 1 argument (clip to [-1, 1]) or 3 (v, lo, hi)", name_tok.pos
                )
            if len(args) == 3:
                if args[1].value is None or args[2].value is None:
                    raise ExpressionError(f"{name}() bounds must be constants", name_tok.pos)
                if not args[1].value < args[2].value:
                    raise ExpressionError(f"{name}() needs lo < hi", name_tok.pos)
        self.switches += len(args) if name in ("min", "max") else _SWITCHES.get(name, 0)
        if self.switches > MAX_SWITCHES:
            # Before sympy builds the call: Min/Max compare their arguments pairwise, and the
            # derivative and kink search grow with every switch.
            raise ExpressionError(
                f"too many branch points: more than {MAX_SWITCHES} min/max arguments, abs, "
                "sign and clip in one formula",
                name_tok.pos,
            )
        value = None
        if all(a.value is not None for a in args):
            try:
                value = float(_FLOAT_FUNCS[name](*[a.value for a in args]))
            except (ValueError, OverflowError, ZeroDivisionError):
                raise ExpressionError(
                    f"{name}() of this constant is undefined or too large", name_tok.pos
                ) from None
            self.constant(value, name_tok.pos, f"{name}() of a constant")
        return _Node(builder(*[a.expr for a in args]), value)


def parse_expr_text(text: str) -> sympy.Expr:
    """Parse formula text into a sympy expression in :data:`U` (no domain checks yet)."""
    if not isinstance(text, str):
        raise ExpressionError("a formula must be text")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"formula too long: more than {MAX_LENGTH} characters", MAX_LENGTH)
    if not text.strip():
        raise ExpressionError("empty formula", 0)
    return _Parser(text).parse()
