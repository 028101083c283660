"""The expression language's syntax: text -> a checked tree, in plain Python (no sympy).

Why our own parser: user text must never reach ``eval``/``exec``/``sympify``, and a hand-written
parser lets us bound every resource (length, tokens, node count, nesting depth) *before* any
work is done, and point at the exact character that went wrong.

Why a tree of its own before sympy: every syntax error and every limit on the text (nodes,
depth, constants, exponents, arguments, branch points) is found here, so a malformed or hostile
formula is refused in microseconds, without the 0.3 s sympy import (``candidates check "u+"``).
:mod:`._parser` then builds sympy from the checked tree, adding only the checks that need
sympy's exact arithmetic.

Grammar (precedence low to high; ``**``/``^`` is right-associative and binds tighter than unary
minus, as in Python, so ``-u**2`` is ``-(u**2)``)::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("-" | "+") unary | power
    power  := atom (("**" | "^") unary)?
    atom   := NUMBER | "u" | "x" | "pi" | "e" | NAME "(" expr ("," expr)* ")" | "(" expr ")"
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, TypeVar

from normfree.search_space.errors import ExpressionError
from normfree.search_space.primitives import BY_NAME, PRIMITIVES
from normfree.search_space.printed_size import MAX_SWITCHES

# Limits. Each one bounds a resource an attacker (or a typo) could otherwise exhaust.
MAX_LENGTH = 1000  # characters of formula text
MAX_NODES = 300  # numbers, names, operators and calls in the parse tree
MAX_DEPTH = 40  # nesting of parentheses, calls, unary signs and exponents
MAX_CONSTANT = 1e6  # magnitude of any literal or constant sub-expression
MIN_CONSTANT = 1e-12  # smallest magnitude of a non-zero constant (1e-320 is a typo or an attack)
MAX_EXPONENT = 32  # magnitude of a constant exponent
MAX_ARGS = 8  # arguments of min/max

_Node = TypeVar("_Node")


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "name", "op", "end"; constraints add "str"
    text: str
    pos: int


class TokenCursor:
    """A recursive-descent parser's place in a token list that ends with an "end" token.

    The formula and the constraint languages read tokens, bound their nesting and refuse
    trailing input the same way; each subclass names its error type (called with a message
    and a character position) and the depth limit with the message that states it.
    """

    error: ClassVar[Callable[[str, int], ValueError]]
    max_depth: ClassVar[int]
    too_deep: ClassVar[str]  # the refusal, formatted with max_depth

    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def is_op(self, text: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == text

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise self.error(self.too_deep.format(self.max_depth), pos)

    def leave(self) -> None:
        self.depth -= 1

    def finish(self, node: _Node) -> _Node:
        """``node``, the whole input's parse, once nothing follows it."""
        if self.tok.kind != "end":
            raise self.error(f"unexpected {self.tok.text!r}", self.tok.pos)
        return node


_OPS = ("**", "+", "-", "*", "/", "^", "(", ")", ",")
# How a binary operator folds two constant operands.
_FOLD: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


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


# ---- the function table: name -> (min args, max args) and its float on constants -------------

# Other names of primitives (``search_space.primitives``): numpy's and the papers' spellings.
ALIASES = {"arctan": "atan", "arcsinh": "asinh", "ln": "log"}

# Branch points each call adds (see search_space.printed_size.MAX_SWITCHES): min/max count
# their arguments, clip its two bounds, a kinked primitive (abs, sign) and the functions the
# language spells with one, one switch each.
_SWITCHES = {
    **{p.name: 1 for p in PRIMITIVES if p.kink},
    **{alias: 1 for alias, name in ALIASES.items() if BY_NAME[name].kink},
    **{"cbrt": 1, "softsign": 1, "relu": 1, "clip": 2, "clamp": 2},
}

# Floats of the constant functions, used to bound constant sub-expressions *before* sympy
# builds them (so 999999**32 is refused without sympy ever computing it). Every name the
# language calls is here; :mod:`._parser` says how each becomes sympy.
FOLD: dict[str, Callable[..., float]] = {
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
# clip(v) clips to [-1, 1] as in science.md; clip(v, lo, hi) to [lo, hi].
_ARGS = {"clip": (1, 3), "clamp": (1, 3), "min": (2, MAX_ARGS), "max": (2, MAX_ARGS)}
FUNCTIONS: dict[str, tuple[int, int]] = {name: _ARGS.get(name, (1, 1)) for name in FOLD}

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
VARIABLES = ("u", "x")


@dataclass(frozen=True)
class Tree:
    """One node of a checked formula.

    ``op`` is ``num``, ``var``, ``const``, ``neg``, ``+``, ``-``, ``*``, ``/``, ``**`` or
    ``call``; ``text`` the number's text or the constant's or function's name; ``pos`` the
    character an error about this node points at (its operator, name or number); ``value`` its
    float when the node is constant (else None).
    """

    op: str
    pos: int
    args: tuple[Tree, ...] = ()
    text: str = ""
    value: float | None = None

    @property
    def number(self) -> Fraction:
        """A ``num`` node's exact value (decimal text reads back exactly: 2.72 is 68/25)."""
        return Fraction(self.text)


class _Parser(TokenCursor):
    error = ExpressionError
    max_depth = MAX_DEPTH
    too_deep = "formula nested too deeply: more than {} levels"

    def __init__(self, text: str) -> None:
        super().__init__(text, tokenize(text))
        self.nodes = 0
        self.switches = 0

    # -- bookkeeping --------------------------------------------------------------------------
    def expect(self, text: str) -> Token:
        if self.is_op(text):
            return self.advance()
        found = "end of input" if self.tok.kind == "end" else repr(self.tok.text)
        raise ExpressionError(f"expected {text!r}, found {found}", self.tok.pos)

    def count(self, pos: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ExpressionError(f"formula too large: more than {MAX_NODES} nodes", pos)

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
    def parse(self) -> Tree:
        return self.finish(self.expr())

    def expr(self) -> Tree:
        self.enter(self.tok.pos)
        left = self.chain("+-", self.term)
        self.leave()
        return left

    def term(self) -> Tree:
        return self.chain("*/", self.unary)

    def chain(self, ops: str, operand: Callable[[], Tree]) -> Tree:
        """operand (op operand)* for the left-associative operators ``ops``, folding constant
        pairs as it goes (so every constant sub-expression is bounded where it is written)."""
        left = operand()
        while self.tok.kind == "op" and self.tok.text in ops:
            op = self.advance()
            self.count(op.pos)
            right = operand()
            if op.text == "/" and right.value == 0:
                raise ExpressionError("division by zero", op.pos)
            value = None
            if left.value is not None and right.value is not None:
                value = _FOLD[op.text](left.value, right.value)
            self.constant(value, op.pos, "constant")
            left = Tree(op.text, op.pos, (left, right), value=value)
        return left

    def unary(self) -> Tree:
        if self.tok.kind == "op" and self.tok.text in "+-":
            op = self.advance()
            self.count(op.pos)
            self.enter(op.pos)
            inner = self.unary()
            self.leave()
            if op.text == "+":
                return inner
            value = None if inner.value is None else -inner.value
            return Tree("neg", op.pos, (inner,), value=value)
        return self.power()

    def power(self) -> Tree:
        base = self.atom()
        if self.tok.kind == "op" and self.tok.text in ("**", "^"):
            op = self.advance()
            self.count(op.pos)
            self.enter(op.pos)
            exponent = self.unary()
            self.leave()
            return self.make_pow(base, exponent, op.pos)
        return base

    def make_pow(self, base: Tree, exponent: Tree, pos: int) -> Tree:
        if exponent.value is None:
            if base.value is not None and base.value > 0:
                # c**g(u) with a positive constant c is exp(g(u)*log(c)): kernel-safe.
                return Tree("**", pos, (base, exponent))
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
        return Tree("**", pos, (base, exponent), value=value)

    def atom(self) -> Tree:
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
            return Tree("num", t.pos, text=t.text, value=float(frac))
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
                return Tree("var", t.pos, text=name)
            if name in CONSTANTS:
                return Tree("const", t.pos, text=name, value=CONSTANTS[name])
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

    def call(self, name_tok: Token) -> Tree:
        name = name_tok.text
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"unknown function {name!r}: allowed are {', '.join(sorted(FUNCTIONS))}",
                name_tok.pos,
            )
        lo, hi = FUNCTIONS[name]
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
                value = float(FOLD[name](*[a.value for a in args]))
            except (ValueError, OverflowError, ZeroDivisionError):
                raise ExpressionError(
                    f"{name}() of this constant is undefined or too large", name_tok.pos
                ) from None
            self.constant(value, name_tok.pos, f"{name}() of a constant")
        return Tree("call", name_tok.pos, tuple(args), text=name, value=value)


def parse_tree(text: str) -> Tree:
    """Check formula text against the language and its limits; the tree :mod:`._parser` builds.

    Raises :class:`ExpressionError` with the reason and the character position.
    """
    if not isinstance(text, str):
        raise ExpressionError("a formula must be text")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"formula too long: more than {MAX_LENGTH} characters", MAX_LENGTH)
    if not text.strip():
        raise ExpressionError("empty formula", 0)
    return _Parser(text).parse()
