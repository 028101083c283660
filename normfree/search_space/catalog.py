"""The catalog: every named function once, as a formula string in one table.

Entries are parsed by the same expression language users write in, so the catalog and user
submissions pass identical checks. Candidates are built on first use and kept. Names are unique
across the catalog, the baselines and the transforms.

``resolve`` accepts a catalog name (``erf``), a transform call (``shift_h(erf, 0.5)``, nested
``sign_flip(shift_h(tanh, 0.1))``) or a formula (``u/(1+abs(u))``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from normfree.search_space._parser import parse_expr_text
from normfree.search_space._syntax import FUNCTIONS, Token, tokenize
from normfree.search_space.baselines import BASELINES, Baseline
from normfree.search_space.candidate import Candidate, Lineage, build_candidate
from normfree.search_space.errors import ExpressionError
from normfree.search_space.transforms import TRANSFORMS, apply

DERF = "Chen, Lu, Zhu, Sun, Liu: Stronger Normalization-Free Transformers (arXiv 2512.10938)"
DYT = "Zhu, Chen, He, LeCun, Liu: Transformers without Normalization (CVPR 2025)"
DERF_PROPS = DERF + ", property studies"

Group = Literal["natural", "transformed", "clipped unbounded", "ratio", "growth", "non-monotonic"]


@dataclass(frozen=True)
class Entry:
    """One catalog row: the single definition of a named function.

    ``reference`` is the function as its source writes it (science.md), in Python over ``u``
    (``pi``, ``abs``, ``sign``, ``sqrt``, ``exp``, ``log``, ``sin``, ``cos``, ``sinh``, ``cosh``,
    ``tanh``, ``erf``, ``arctan``, ``asinh``, ``clip(v)`` to [-1, 1], ``clamp(v, lo, hi)``): a
    second, independent transcription the tests evaluate with numpy and torch against
    ``formula``'s candidate and its kernels.
    """

    name: str
    group: Group
    formula: str
    citation: str
    description: str = ""
    reference: str = ""


# science.md section 2 (the 16 search candidates) and section 3 (growth-rate and non-monotonic
# families). clip(v) = min(max(v, -1), 1); sign(0) = 0.
ENTRIES: tuple[Entry, ...] = (
    Entry("erf", "natural", "erf(u)", DERF, "Derf", reference="erf(u)"),
    Entry("tanh", "natural", "tanh(u)", DYT, "DyT", reference="tanh(u)"),
    Entry("arctan", "natural", "2/pi*atan(u)", DERF, reference="(2 / pi) * arctan(u)"),
    Entry("satursin", "transformed", "sin(clip(u, -pi/2, pi/2))", DERF,
          reference="sin(clamp(u, -pi / 2, pi / 2))"),
    Entry("expsign", "transformed", "sign(u)*(1 - exp(-abs(u)))", DERF,
          reference="sign(u) * (1 - exp(-abs(u)))"),
    Entry("exproot", "transformed", "sign(u)*(1 - exp(-sqrt(abs(u))))", DERF,
          reference="sign(u) * (1 - exp(-sqrt(abs(u))))"),
    Entry("relsign", "transformed", "u/(sqrt(u^2 + 1) + 1)", DERF,
          reference="u / (sqrt(u**2 + 1) + 1)"),
    Entry("isru", "transformed", "u/sqrt(u^2 + 1)", DERF, reference="u / sqrt(u**2 + 1)"),
    Entry("cubsign", "transformed", "u^3/(abs(u)^3 + 1)", DERF,
          reference="u**3 / (abs(u)**3 + 1)"),
    Entry("logsignclip", "clipped unbounded", "clip(sign(u)*log(abs(u) + 1))", DERF,
          reference="clip(sign(u) * log(abs(u) + 1))"),
    Entry("logquadclip", "clipped unbounded", "clip(sign(u)*log(u^2 + 1))", DERF,
          reference="clip(sign(u) * log(u**2 + 1))"),
    Entry("arcsinhclip", "clipped unbounded", "clip(asinh(u))", DERF,
          reference="clip(asinh(u))"),
    Entry("power23clip", "clipped unbounded", "clip(sign(u)*abs(u)^(2/3))", DERF,
          reference="clip(sign(u) * abs(u)**(2 / 3))"),
    Entry("linearclip", "clipped unbounded", "clip(u)", DERF, reference="clip(u)"),
    Entry("smoothsign", "ratio", "u/(1 + abs(u))", DERF, reference="u / (1 + abs(u))"),
    Entry("saturlog", "ratio", "log(abs(u) + 1)/(log(abs(u) + 1) + 1)*sign(u)", DERF,
          reference="log(abs(u) + 1) / (log(abs(u) + 1) + 1) * sign(u)"),
    # Growth-rate family: unbounded and unclipped.
    Entry("linear", "growth", "u", DERF_PROPS, "linear growth", reference="u"),
    Entry("power23", "growth", "sign(u)*abs(u)^(2/3)", DERF_PROPS, "sub-linear power 2/3",
          reference="sign(u) * abs(u)**(2 / 3)"),
    Entry("logsign", "growth", "sign(u)*log(abs(u) + 1)", DERF_PROPS, "logarithmic",
          reference="sign(u) * log(abs(u) + 1)"),
    Entry("logquad", "growth", "sign(u)*log(u^2 + 1)", DERF_PROPS, "logarithmic",
          reference="sign(u) * log(u**2 + 1)"),
    Entry("asinh", "growth", "asinh(u)", DERF_PROPS, "logarithmic", reference="asinh(u)"),
    # Non-monotonic family: each peaks near 1.
    Entry("sin", "non-monotonic", "sin(u)", DERF_PROPS, reference="sin(u)"),
    Entry("dampx", "non-monotonic", "2*u/(1 + u^2)", DERF_PROPS, reference="2 * u / (1 + u**2)"),
    Entry("dampexp", "non-monotonic", "2.72*u*exp(-abs(u))", DERF_PROPS,
          reference="2.72 * u * exp(-abs(u))"),
)  # fmt: skip

# The paper's 16 search candidates (science.md section 2), by name: the table's order and rows
# may change, this list does not.
SEARCH16: tuple[str, ...] = (
    "erf", "tanh", "arctan", "satursin", "expsign", "exproot", "relsign", "isru", "cubsign",
    "logsignclip", "logquadclip", "arcsinhclip", "power23clip", "linearclip", "smoothsign",
    "saturlog",
)  # fmt: skip


_BY_NAME = {e.name: e for e in ENTRIES}
_BASELINES = {b.name: b for b in BASELINES}
_CACHE: dict[str, Candidate] = {}
_RESOLVED: dict[str, Candidate] = {}
_RESOLVED_MAX = 512

assert len(_BY_NAME) == len(ENTRIES), "catalog names must be unique"
assert len(set(SEARCH16)) == 16 and set(SEARCH16) <= set(_BY_NAME), "the paper's 16, by name"
assert not (set(_BY_NAME) & set(_BASELINES)) and not (set(_BY_NAME) & set(TRANSFORMS))


def names() -> list[str]:
    """Names of the formula entries, in table order."""
    return [e.name for e in ENTRIES]


def get(name: str) -> Candidate:
    """The catalog candidate ``name`` (``KeyError`` with the known names otherwise)."""
    if name in _CACHE:
        return _CACHE[name]
    entry = _BY_NAME.get(name)
    if entry is None:
        if name in _BASELINES:
            raise KeyError(
                f"{name!r} is a baseline reference entry, not a formula: see catalog.baseline()"
            )
        raise KeyError(f"unknown candidate {name!r}; known: {', '.join(_BY_NAME)}")
    cand = build_candidate(
        parse_expr_text(entry.formula),
        name=entry.name,
        formula=entry.formula,
        lineage=Lineage(base=entry.name),
        group=entry.group,
        citation=entry.citation,
        description=entry.description,
    )
    _CACHE[name] = cand
    return cand


def all(group: str | None = None) -> list[Candidate]:
    """Every formula entry (optionally one group), in table order. Baselines: ``baselines()``."""
    return [get(e.name) for e in ENTRIES if group is None or e.group == group]


def search16() -> list[Candidate]:
    """The 16 search candidates of science.md section 2."""
    return [get(n) for n in SEARCH16]


def baselines() -> list[Baseline]:
    return list(BASELINES)


def baseline(name: str) -> Baseline:
    return _BASELINES[name]


def is_baseline(name: str) -> bool:
    return name in _BASELINES


# -- resolve ----------------------------------------------------------------------------------


class _CallParser:
    """Transform calls: ``NAME "(" ref ("," signed-number)* ")"``, ref = catalog name or call."""

    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def expect(self, text: str) -> None:
        if not (self.tok.kind == "op" and self.tok.text == text):
            raise ExpressionError(f"expected {text!r}", self.tok.pos)
        self.i += 1

    def ref(self) -> Candidate:
        t = self.tok
        if t.kind != "name":
            raise ExpressionError("expected a catalog name or a transform call", t.pos)
        self.i += 1
        if self.tok.kind == "op" and self.tok.text == "(":
            if t.text not in TRANSFORMS:
                raise ExpressionError(f"unknown transform {t.text!r}", t.pos)
            self.depth += 1
            if self.depth > 16:
                raise ExpressionError("transform calls nested too deeply", t.pos)
            self.i += 1
            base = self.ref()
            params: list[float] = []
            while self.tok.kind == "op" and self.tok.text == ",":
                self.i += 1
                params.append(self.number())
            self.expect(")")
            self.depth -= 1
            try:
                return apply(t.text, base, *params)
            except ExpressionError as exc:
                raise ExpressionError(exc.message, t.pos) from None
        if t.text in _BY_NAME:
            return get(t.text)
        raise ExpressionError(
            f"unknown catalog name {t.text!r} (a transform takes a catalog name or another "
            "transform call; to transform your own formula use the Python API on parse(...))",
            t.pos,
        )

    def number(self) -> float:
        sign = 1.0
        while self.tok.kind == "op" and self.tok.text in "+-":
            sign = -sign if self.tok.text == "-" else sign
            self.i += 1
        t = self.tok
        if t.kind != "num":
            raise ExpressionError("transform parameters must be numbers", t.pos)
        self.i += 1
        try:
            value = float(Fraction(t.text))
        except (OverflowError, ValueError, ZeroDivisionError):  # 1e400 has no float
            raise ExpressionError(
                f"transform parameter {t.text!r} is not a finite number", t.pos
            ) from None
        return sign * value


def _is_transform_call(tokens: list[Token]) -> bool:
    """A transform call: a transform name that is not also a formula function (clip is both),
    or a transform name, "(", then a catalog name or another transform call."""
    if (
        tokens[0].kind == "name"
        and tokens[0].text in TRANSFORMS
        and tokens[0].text not in FUNCTIONS
    ):
        return True
    return (
        len(tokens) >= 4
        and tokens[0].kind == "name"
        and tokens[0].text in TRANSFORMS
        and tokens[1].text == "("
        and tokens[2].kind == "name"
        and (
            (tokens[2].text in _BY_NAME and tokens[3].text in (",", ")"))
            or (tokens[2].text in TRANSFORMS and tokens[3].text == "(")
        )
    )


def resolve(text: str) -> Candidate:
    """A catalog name, a transform call or a formula -> a validated :class:`Candidate`."""
    if not isinstance(text, str):
        raise ExpressionError("expected text")
    key = text.strip()
    if key in _BY_NAME:
        return get(key)
    if key in _BASELINES:
        raise ExpressionError(f"{key!r} is a baseline (a reference module), not a formula")
    if key in _RESOLVED:
        return _RESOLVED[key]
    if len(key) > 1000:
        raise ExpressionError("text too long: more than 1000 characters", 1000)
    tokens = tokenize(key)
    if _is_transform_call(tokens):
        parser = _CallParser(key)
        cand = parser.ref()
        if parser.tok.kind != "end":
            raise ExpressionError(f"unexpected {parser.tok.text!r}", parser.tok.pos)
    else:
        from normfree.search_space.candidate import parse

        cand = parse(key)
    if len(_RESOLVED) >= _RESOLVED_MAX:
        _RESOLVED.pop(next(iter(_RESOLVED)))
    _RESOLVED[key] = cand
    return cand


@functools.lru_cache(maxsize=4096)
def describe(text: str) -> tuple[str, dict[str, Any]] | None:
    """(group, JSON-safe properties) of a catalog name or transform call; None if unknown.

    Leaderboards ask this for arms that have no stored candidate row (catalog functions and
    transform calls are not stored), so the CLI and the API file them in the same group.
    50-200 ms of sympy the first time per name.
    """
    from normfree.jsonsafe import finite

    try:
        cand = resolve(text)
    except (ExpressionError, KeyError, ValueError):
        return None
    try:
        props = cand.properties.model_dump(mode="json")
    except Exception:  # a property computation that fails must not hide the arm's group
        props = {}
    return cand.group, finite(props, "text")  # as the candidate pages show them


__all__ = [
    "BASELINES",
    "ENTRIES",
    "SEARCH16",
    "Baseline",
    "Entry",
    "all",
    "baseline",
    "baselines",
    "describe",
    "get",
    "is_baseline",
    "names",
    "resolve",
    "search16",
]
