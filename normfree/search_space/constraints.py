"""A small, safe constraint language over a candidate's :class:`Properties`.

``bounded and monotone``, ``odd and slope0 >= 0.5``, ``growth in (linear, sublinear)``: a
generate study filters its proposals with one such expression, and the API and the CLI validate
it when a study is created. It is parsed here (never ``eval``): a tokenizer with length, token
and depth limits, a recursive-descent parser, and a tree evaluated against the property record.
It lives in the search space because it reads nothing but Properties.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from normfree.search_space._syntax import Token, TokenCursor
from normfree.search_space.properties import Properties


class ConstraintError(ValueError):
    """A constraint string normfree refuses, with the character position of the problem."""

    def __init__(self, message: str, position: int | None = None) -> None:
        self.message = message
        self.position = position
        where = f" (at position {position})" if position is not None else ""
        super().__init__(f"{message}{where}")


MAX_CONSTRAINT_LENGTH = 500
MAX_CONSTRAINT_TOKENS = 120
MAX_CONSTRAINT_DEPTH = 16

_BOOL_FIELDS = ("zero_centred", "odd", "bounded", "continuous", "differentiable")
_NUM_FIELDS = (
    "f0",
    "slope0",
    "flat_halfwidth",
    "growth_exponent",
    "limit_neg",
    "limit_pos",
    "range_min",
    "range_max",
)
_STR_FIELDS: dict[str, tuple[str, ...]] = {
    name: tuple(get_args(Properties.model_fields[name].annotation))
    for name in ("monotone", "growth")
}
# Flags that read as English: name -> (field, operator, value).
_ALIASES: dict[str, tuple[str, str, Any]] = {
    "monotone": ("monotone", "in", ("increasing", "decreasing")),
    "increasing": ("monotone", "==", "increasing"),
    "decreasing": ("monotone", "==", "decreasing"),
    "smooth": ("differentiable", "==", True),
    "zero_centered": ("zero_centred", "==", True),
    "centred": ("zero_centred", "==", True),
    "centered": ("zero_centred", "==", True),
    "flat_centre": ("flat_halfwidth", ">", 0.0),
    "flat_center": ("flat_halfwidth", ">", 0.0),
    "unbounded": ("bounded", "==", False),
}
_KEYWORDS = ("and", "or", "not", "in", "true", "false")
_COMPARE = ("==", "!=", "<=", ">=", "<", ">")


def _squash(word: str) -> str:
    """Spelling-insensitive value key: 'sub-linear power' = sub_linear_power = sublinearpower."""
    return word.lower().replace("-", "").replace("_", "").replace(" ", "")


def _tokenize_constraint(text: str) -> list[Token]:
    toks: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t":
            i += 1
        elif ch.isascii() and (ch.isalpha() or ch == "_"):
            j = i
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            toks.append(Token("name", text[i:j].lower(), i))
            i = j
        elif ch.isascii() and (ch.isdigit() or ch in ".-+"):
            j = i + 1
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] in ".+-"):
                if text[j] in "+-" and text[j - 1] not in "eE":
                    break
                j += 1
            try:
                value = float(text[i:j])
            except ValueError:
                raise ConstraintError(f"malformed number {text[i:j]!r}", i) from None
            if not math.isfinite(value):
                raise ConstraintError("numbers must be finite", i)
            toks.append(Token("num", text[i:j], i))
            i = j
        elif ch in "'\"":
            j = text.find(ch, i + 1)
            if j < 0:
                raise ConstraintError("unterminated string", i)
            word = text[i + 1 : j]
            if not _squash(word).isalnum() or len(word) > 40:
                raise ConstraintError("a quoted value holds letters, digits, '-', '_', ' '", i)
            toks.append(Token("str", word.lower(), i))
            i = j + 1
        else:
            for op in (*_COMPARE, "(", ")", ","):
                if text.startswith(op, i):
                    toks.append(Token("op", op, i))
                    i += len(op)
                    break
            else:
                raise ConstraintError(f"unexpected character {ch!r}", i)
        if len(toks) > MAX_CONSTRAINT_TOKENS:
            raise ConstraintError(
                f"constraint too long: more than {MAX_CONSTRAINT_TOKENS} tokens", i
            )
    toks.append(Token("end", "", n))
    return toks


@dataclass(frozen=True)
class _Cmp:
    field: str
    op: str  # one of _COMPARE or "in"
    value: Any
    text: str  # the clause as written, for rejection reasons

    def __call__(self, props: Properties) -> bool:
        have = getattr(props, self.field)
        if self.op == "in":
            return have in self.value
        if have is None:
            return self.op == "!="
        if self.op == "==":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        return {"<": have < self.value, "<=": have <= self.value, ">": have > self.value,
                ">=": have >= self.value}[self.op]  # fmt: skip


@dataclass(frozen=True)
class _Not:
    item: Any

    def __call__(self, props: Properties) -> bool:
        return not self.item(props)


@dataclass(frozen=True)
class _Join:
    """Two or more items joined by ``word``: "and" holds when all hold, "or" when any does."""

    word: str
    items: tuple[Any, ...]

    def __call__(self, props: Properties) -> bool:
        test = all if self.word == "and" else any
        return test(i(props) for i in self.items)


class _ConstraintParser(TokenCursor):
    """Recursive descent: or := and ("or" and)*; and := not ("and" not)*; not := "not" not | atom;
    atom := "(" or ")" | FIELD OP VALUE | FIELD "in" "(" VALUE ("," VALUE)* ")" | FLAG."""

    error = ConstraintError
    max_depth = MAX_CONSTRAINT_DEPTH
    too_deep = "constraint nested more than {} deep"

    def __init__(self, text: str) -> None:
        super().__init__(text, _tokenize_constraint(text))

    def is_word(self, text: str) -> bool:
        return self.tok.kind == "name" and self.tok.text == text

    def parse(self) -> Any:
        return self.finish(self.or_())

    def join(self, word: str, operand: Callable[[], Any]) -> Any:
        """operand (``word`` operand)*: the one operand alone, or their :class:`_Join`."""
        items = [operand()]
        while self.is_word(word):
            self.advance()
            items.append(operand())
        return items[0] if len(items) == 1 else _Join(word, tuple(items))

    def or_(self) -> Any:
        return self.join("or", self.and_)

    def and_(self) -> Any:
        return self.join("and", self.not_)

    def not_(self) -> Any:
        if self.is_word("not"):
            t = self.advance()
            self.enter(t.pos)
            inner = self.not_()
            self.leave()
            return _Not(inner)
        return self.atom()

    def atom(self) -> Any:
        t = self.tok
        if self.is_op("("):
            self.advance()
            self.enter(t.pos)
            inner = self.or_()
            self.leave()
            if not self.is_op(")"):
                raise ConstraintError("expected ')'", self.tok.pos)
            self.advance()
            return inner
        if t.kind != "name" or t.text in _KEYWORDS:
            found = "end of constraint" if t.kind == "end" else repr(t.text)
            raise ConstraintError(f"expected a property, found {found}", t.pos)
        self.advance()
        name = t.text
        if self.tok.kind == "op" and self.tok.text in _COMPARE:
            op = self.advance().text
            return self.compare(name, op, t)
        if self.is_word("in"):
            self.advance()
            return self.member(name, t)
        if name in _ALIASES:
            fld, op, value = _ALIASES[name]
            return _Cmp(fld, op, value, name)
        if name in _BOOL_FIELDS:
            return _Cmp(name, "==", True, name)
        raise ConstraintError(self.unknown(name), t.pos)

    @staticmethod
    def unknown(name: str) -> str:
        fields = sorted([*_BOOL_FIELDS, *_NUM_FIELDS, *_STR_FIELDS, *_ALIASES])
        return f"unknown property {name!r}; use one of {', '.join(fields)}"

    def value(self) -> Token:
        t = self.advance()
        if t.kind not in ("num", "str", "name") or t.text in ("and", "or", "not", "in"):
            raise ConstraintError("expected a value", t.pos)
        return t

    def typed(self, name: str, t: Token) -> Any:
        if name in _BOOL_FIELDS:
            if t.text not in ("true", "false"):
                raise ConstraintError(f"{name} is true or false", t.pos)
            return t.text == "true"
        if name in _NUM_FIELDS:
            if t.kind != "num":
                raise ConstraintError(f"{name} is compared with a number", t.pos)
            return float(t.text)
        allowed = {_squash(v): v for v in _STR_FIELDS[name]}
        if _squash(t.text) not in allowed:
            raise ConstraintError(f"{name} is one of {', '.join(allowed.values())}", t.pos)
        return allowed[_squash(t.text)]

    def compare(self, name: str, op: str, t: Token) -> _Cmp:
        if name not in (*_BOOL_FIELDS, *_NUM_FIELDS, *_STR_FIELDS):
            raise ConstraintError(self.unknown(name), t.pos)
        if op not in ("==", "!=") and name not in _NUM_FIELDS:
            raise ConstraintError(f"{name} can only be compared with == or !=", t.pos)
        v = self.value()
        return _Cmp(name, op, self.typed(name, v), self.text[t.pos : v.pos + len(v.text)])

    def member(self, name: str, t: Token) -> _Cmp:
        if name not in _STR_FIELDS:
            raise ConstraintError(f"'in' applies to {', '.join(_STR_FIELDS)}", t.pos)
        if not self.is_op("("):
            raise ConstraintError("expected '(' after 'in'", self.tok.pos)
        self.advance()
        values = [self.typed(name, self.value())]
        while self.is_op(","):
            self.advance()
            values.append(self.typed(name, self.value()))
        if not self.is_op(")"):
            raise ConstraintError("expected ')'", self.tok.pos)
        end = self.advance()
        return _Cmp(name, "in", tuple(values), self.text[t.pos : end.pos + 1])


class Constraint:
    """A parsed constraint over :class:`Properties`, e.g. ``bounded and monotone``.

    Language: flags (``bounded``, ``odd``, ``zero_centred``, ``continuous``, ``differentiable``
    and the aliases ``monotone``, ``increasing``, ``smooth``, ``flat_centre``, ``unbounded``),
    comparisons (``slope0 >= 0.5``, ``growth == logarithmic``, ``monotone != neither``),
    membership (``growth in (bounded, logarithmic)``), ``not``, ``and``, ``or``, parentheses.
    Parsed by a bounded recursive-descent parser; evaluated by reading whitelisted fields of a
    ``Properties`` object. Never ``eval``: a hostile string is a :class:`ConstraintError`.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ConstraintError("a constraint is text")
        if len(text) > MAX_CONSTRAINT_LENGTH:
            raise ConstraintError(f"constraint longer than {MAX_CONSTRAINT_LENGTH} characters")
        if not text.strip():
            raise ConstraintError("empty constraint", 0)
        self.text = text.strip()
        self._root = _ConstraintParser(self.text).parse()

    def __call__(self, props: Properties) -> bool:
        return bool(self._root(props))

    def fields(self) -> list[str]:
        """Property fields the constraint reads (for rejection reasons)."""
        out: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, _Cmp):
                out.append(node.field)
            elif isinstance(node, _Not):
                walk(node.item)
            else:
                for i in node.items:
                    walk(i)

        walk(self._root)
        return list(dict.fromkeys(out))

    def explain(self, props: Properties) -> str:
        """Why ``props`` fails: the constraint and the values it read."""
        values = ", ".join(f"{f}={getattr(props, f)!r}" for f in self.fields())
        return f"violates {self.text!r} ({values})"

    def __repr__(self) -> str:
        return f"Constraint({self.text!r})"
