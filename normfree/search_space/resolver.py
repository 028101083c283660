"""The one resolver: any name a user may give for a function -> a validated :class:`Candidate`.

Accepted, at any depth: a catalog name (``erf``), a paper alias (``derf``, ``dyt``: the function
behind the operator), a stored user candidate by name (``softsign15``, through a :class:`Stored`
callback so this bottom layer never imports storage), a formula (``u/(1+abs(u))``) and a
transform call on any of these (``shift_h(softsign15, 0.5)``, ``flat_centre(u/(1+abs(u)), 1)``,
``sign_flip(linear_part(erf, 0.1))``). REST validation, the CLI, the driver and the workers all
resolve through here, so what validation accepts, a worker can build.

A worker may have no database: :func:`bake` returns, besides the candidate, the *definition* of a
text that names stored candidates, with each stored name replaced by its formula
(``shift_h(1.5*u/(1+abs(u)), 0.5)``). That text resolves with no lookup at all to the same
function; studies put it in ``NormSpec.formula``.

An unknown name is refused with the nearest known names (``tahn``: did you mean ``tanh``?).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from normfree.search_space._syntax import CONSTANTS, FUNCTIONS, VARIABLES, Token, tokenize
from normfree.search_space.candidate import Candidate, Lineage, format_param
from normfree.search_space.errors import ExpressionError

MAX_NESTING = 16
MAX_TEXT = 1000


@dataclass(frozen=True)
class Stored:
    """Stored user candidates as the resolver sees them.

    ``formula(name)`` is the stored formula text of ``name`` (None: no such candidate);
    ``names()`` lists stored names, only read to suggest near names for an unknown one.
    """

    formula: Callable[[str], str | None]
    names: Callable[[], Iterable[str]] = tuple


# -- the parsed reference ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Ref:
    """A bare name: catalog, alias or stored."""

    name: str
    pos: int


@dataclass(frozen=True)
class _Formula:
    """Formula text over ``u`` (parsed by the expression language)."""

    text: str
    pos: int


@dataclass(frozen=True)
class _Call:
    """``transform(base, params...)``."""

    transform: str
    base: _Ref | _Formula | _Call
    params: tuple[float, ...]
    pos: int


_Node = _Ref | _Formula | _Call


def _transforms() -> dict[str, object]:
    from normfree.search_space.transforms import TRANSFORMS

    return TRANSFORMS  # type: ignore[return-value]


class _Reader:
    """Turns token slices into nodes. A slice is [lo, hi) of ``tokens`` (the end token excluded)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[Token] = tokenize(text)

    def _depths(self, lo: int, hi: int) -> Iterator[tuple[int, Token, int]]:
        """Each token of [lo, hi) with the bracket depth after it, counted from ``lo``: a "("
        is inside its own group, a ")" already outside it."""
        depth = 0
        for i in range(lo, hi):
            t = self.tokens[i]
            if t.kind == "op" and t.text in ("(", ")"):
                depth += 1 if t.text == "(" else -1
            yield i, t, depth

    def _close(self, open_at: int, hi: int) -> int:
        """Index of the ")" matching the "(" at ``open_at`` (``hi`` when unbalanced)."""
        for i, t, depth in self._depths(open_at, hi):
            if depth == 0 and t.text == ")" and t.kind == "op":
                return i
        return hi

    def _args(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Top-level comma-separated slices of [lo, hi)."""
        out, start = [], lo
        for i, t, depth in self._depths(lo, hi):
            if depth == 0 and t.kind == "op" and t.text == ",":
                out.append((start, i))
                start = i + 1
        out.append((start, hi))
        return out

    def _is_name(self, lo: int, hi: int) -> bool:
        t = self.tokens[lo]
        return (
            hi - lo == 1
            and t.kind == "name"
            and t.text not in VARIABLES
            and t.text not in CONSTANTS
        )

    def _call_shape(self, lo: int, hi: int) -> list[tuple[int, int]] | None:
        """The argument slices when [lo, hi) is ``NAME ( ... )`` with NAME a transform."""
        t = self.tokens[lo]
        if not (t.kind == "name" and t.text in _transforms() and hi - lo >= 3):
            return None
        nxt = self.tokens[lo + 1]
        if not (nxt.kind == "op" and nxt.text == "(") or self._close(lo + 1, hi) != hi - 1:
            return None
        return self._args(lo + 2, hi - 1)

    def _is_call(self, lo: int, hi: int) -> bool:
        """A transform call, not a formula: ``clip`` is both, and is the transform when it has
        two arguments (the formula's clip takes one or three) or its first argument is a name
        or another transform call."""
        args = self._call_shape(lo, hi)
        if args is None:
            return False
        if self.tokens[lo].text not in FUNCTIONS or len(args) == 2:
            return True
        first = args[0]
        return first[1] > first[0] and (self._is_name(*first) or self._is_call(*first))

    def node(self, lo: int, hi: int, depth: int = 0) -> _Node:
        if hi <= lo:
            pos = self.tokens[lo].pos if lo < len(self.tokens) else len(self.text)
            raise ExpressionError("expected a function: a name, a formula or a transform call", pos)
        first = self.tokens[lo]
        if self._is_name(lo, hi):
            return _Ref(first.text, first.pos)
        if self._is_call(lo, hi):
            if depth >= MAX_NESTING:
                raise ExpressionError("transform calls nested too deeply", first.pos)
            args = self._call_shape(lo, hi)
            assert args is not None
            base = self.node(*args[0], depth=depth + 1)
            params = tuple(self._number(a, b) for a, b in args[1:])
            return _Call(first.text, base, params, first.pos)
        self._refuse_mixed(lo, hi)
        start = first.pos
        end = self.tokens[hi].pos if hi < len(self.tokens) else len(self.text)
        return _Formula(self.text[start:end].strip(), start)

    def _refuse_mixed(self, lo: int, hi: int) -> None:
        """Say what is wrong with a formula slice that is really a misspelt or misplaced call:
        ``nope(erf)`` (no such transform) or ``shift_h(erf, 1) + 1`` (a call inside a formula)."""
        first = self.tokens[lo]
        if first.kind != "name" or hi - lo < 3 or self.tokens[lo + 1].text != "(":
            return
        if first.text not in _transforms() and first.text not in FUNCTIONS:
            raise ExpressionError(
                f"unknown transform or function {first.text!r}"
                + did_you_mean(first.text, [*_transforms(), *FUNCTIONS]),
                first.pos,
            )
        close = self._close(lo + 1, hi)
        if first.text not in FUNCTIONS and close < hi - 1:
            t = self.tokens[close + 1]
            raise ExpressionError(
                f"unexpected {t.text!r} after a transform call (a transform call is a whole "
                "function, not part of a formula)",
                t.pos,
            )

    def _number(self, lo: int, hi: int) -> float:
        sign, i = 1.0, lo
        while i < hi and self.tokens[i].kind == "op" and self.tokens[i].text in "+-":
            sign = -sign if self.tokens[i].text == "-" else sign
            i += 1
        t = self.tokens[min(i, len(self.tokens) - 1)]
        if i != hi - 1 or t.kind != "num":
            raise ExpressionError("transform parameters must be numbers", t.pos)
        try:
            return sign * float(Fraction(t.text))
        except (OverflowError, ValueError, ZeroDivisionError):  # 1e400 has no float
            raise ExpressionError(
                f"transform parameter {t.text!r} is not a finite number", t.pos
            ) from None


def _read(text: object) -> _Node:
    if not isinstance(text, str):
        raise ExpressionError("expected text")
    key = text.strip()
    if not key:
        raise ExpressionError("expected a function: a name, a formula or a transform call", 0)
    if len(key) > MAX_TEXT:
        raise ExpressionError(f"text too long: more than {MAX_TEXT} characters", MAX_TEXT)
    reader = _Reader(key)
    return reader.node(0, len(reader.tokens) - 1)


# -- names ------------------------------------------------------------------------------------


def known_names(stored: Stored | None = None) -> list[str]:
    """Every name a function may be given by: catalog, aliases, baselines, transforms, stored."""
    from normfree.search_space import catalog
    from normfree.search_space.baselines import NAMES as BASELINES
    from normfree.specs import NORM_ALIASES

    out = [*catalog.names(), *NORM_ALIASES, *BASELINES, *_transforms()]
    if stored is not None:
        # suggestions are a courtesy: a failing listing must not hide the error
        with contextlib.suppress(Exception):
            out += list(stored.names())
    return list(dict.fromkeys(out))


def suggest(name: str, stored: Stored | None = None, n: int = 3) -> list[str]:
    """The known names nearest to ``name`` (difflib), best first; empty when none is near."""
    return difflib.get_close_matches(name, known_names(stored), n=n, cutoff=0.6)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'tanh'?)`` for the nearest of ``choices``, or ``""``: one spelling for
    every "unknown X" message (functions, proxies, metrics)."""
    near = difflib.get_close_matches(name, list(dict.fromkeys(choices)), n=3, cutoff=0.6)
    if not near:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in near) + "?)"


def _unknown(name: str, pos: int, stored: Stored | None) -> ExpressionError:
    near = suggest(name, stored)
    hint = (
        f"; did you mean {' or '.join(repr(c) for c in near)}?"
        if near
        else " (a catalog name, a stored candidate's name, a formula in u or a transform call)"
    )
    return ExpressionError(f"unknown function {name!r}{hint}", pos)


# -- resolution -------------------------------------------------------------------------------


def _ref(node: _Ref, stored: Stored | None) -> tuple[Candidate, str | None]:
    """(candidate, stored formula or None) of a bare name."""
    from normfree.search_space import catalog
    from normfree.search_space.baselines import NAMES as BASELINES
    from normfree.specs import NORM_ALIASES

    name = node.name
    if catalog.has(name):
        return catalog.get(name), None
    alias = NORM_ALIASES.get(name.lower())
    if alias is not None and catalog.has(alias["name"]):
        return catalog.get(alias["name"]), None
    if name in BASELINES or alias is not None:
        raise ExpressionError(
            f"{name!r} is a baseline (a reference module), not a pointwise function", node.pos
        )
    if name in _transforms():
        raise ExpressionError(f"{name!r} is a transform: call it on a function", node.pos)
    formula = stored.formula(name) if stored is not None else None
    if formula is None:
        raise _unknown(name, node.pos, stored)
    base = resolve(formula)  # a stored formula never names another stored candidate
    lineage = Lineage(base=name, formula=formula)
    return dataclasses.replace(base, name=name, formula=formula, lineage=lineage), formula


def _formula(node: _Formula, stored: Stored | None) -> Candidate:
    from normfree.search_space.candidate import parse

    try:
        return parse(node.text)
    except ExpressionError as exc:
        pos = None if exc.position is None else exc.position + node.pos
        message = exc.message
        bad = next(
            (
                t.text
                for t in tokenize(node.text)
                if t.kind == "name" and t.text not in FUNCTIONS
                and t.text not in CONSTANTS and t.text not in VARIABLES
            ),
            None,
        ) if "unknown" in message else None  # fmt: skip
        if bad:
            message += did_you_mean(bad, [*FUNCTIONS, *known_names(stored)])
        raise ExpressionError(message, pos) from None


def _build(node: _Node, stored: Stored | None) -> tuple[Candidate, str, bool]:
    """(candidate, self-contained definition, whether a stored name was used)."""
    if isinstance(node, _Ref):
        cand, formula = _ref(node, stored)
        return cand, (formula if formula is not None else cand.name), formula is not None
    if isinstance(node, _Formula):
        return _formula(node, stored), node.text, False
    from normfree.search_space.transforms import apply

    base, text, used = _build(node.base, stored)
    try:
        cand = apply(node.transform, base, *node.params)
    except ExpressionError as exc:
        raise ExpressionError(exc.message, node.pos) from None
    args = ", ".join([text, *(format_param(p) for p in node.params)])
    return cand, f"{node.transform}({args})", used


def bake(text: str, stored: Stored | None = None) -> tuple[Candidate, str | None]:
    """(candidate, definition): ``definition`` is the text with every stored name replaced by its
    formula, set only when ``text`` names a stored candidate (None: ``text`` resolves anywhere
    as it is). ``ExpressionError`` with the nearest names for anything unknown."""
    cand, definition, used = _build(_read(text), stored)
    return cand, definition if used else None


def definition(text: str, formulas: Mapping[str, str]) -> str | None:
    """The definition :func:`bake` would give ``text`` when the stored names are ``formulas``
    (name -> formula text), read from the text alone: no symbolic work, so a study plans
    thousands of cells in milliseconds. None when ``text`` names none of them."""

    def walk(node: _Node) -> tuple[str, bool]:
        if isinstance(node, _Ref):
            formula = formulas.get(node.name)
            return (node.name, False) if formula is None else (formula, True)
        if isinstance(node, _Formula):
            return node.text, False
        inner, used = walk(node.base)
        return f"{node.transform}({', '.join([inner, *map(format_param, node.params)])})", used

    try:
        out, used = walk(_read(text))
    except ExpressionError:
        return None
    return out if used else None


def spelling(text: str, *, collapse: bool = False) -> str:
    """The one spelling of a text: transform calls printed as the resolver names their result
    (``linear_part(erf,0.1)`` -> ``linear_part(erf, 0.1)``), names and formulas as given, so
    one function typed two ways is one arm. ``collapse`` also drops transforms applied at their
    identity (``shift_h(erf, 0)`` -> ``erf``): the function's identity, for one row per
    function. Text only (no symbolic work); text that does not read is returned stripped."""
    transforms = _transforms()

    def walk(node: _Node) -> str:
        if isinstance(node, _Call):
            identity = getattr(transforms.get(node.transform), "identity", None)
            if collapse and identity is not None and tuple(node.params) == tuple(identity):
                return walk(node.base)
            return (
                f"{node.transform}({', '.join([walk(node.base), *map(format_param, node.params)])})"
            )
        return node.name if isinstance(node, _Ref) else node.text

    try:
        return walk(_read(text))
    except ExpressionError:
        return text.strip() if isinstance(text, str) else text


def resolve(text: str, stored: Stored | None = None, *, name: str | None = None) -> Candidate:
    """Any accepted text -> its validated :class:`Candidate`; ``name`` names the result (a
    baked definition or a formula keeps the name the user gave it)."""
    node = _read(text)
    if name is not None and isinstance(node, _Formula):
        from normfree.search_space.candidate import parse

        return parse(node.text, name=name)  # as a submission: the formula's lineage is its name
    cand, _, _ = _build(node, stored)
    if name is not None and name != cand.name:
        cand = dataclasses.replace(cand, name=name)
    return cand


__all__ = [
    "Stored",
    "bake",
    "definition",
    "did_you_mean",
    "known_names",
    "resolve",
    "spelling",
    "suggest",
]
