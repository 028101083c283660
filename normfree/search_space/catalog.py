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
from typing import Any, Literal

from normfree.search_space._parser import parse_expr_text
from normfree.search_space.baselines import BASELINES, Baseline
from normfree.search_space.candidate import Candidate, Lineage, build_candidate
from normfree.search_space.errors import ExpressionError
from normfree.search_space.transforms import TRANSFORMS

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


def has(name: str) -> bool:
    """Whether ``name`` is a formula entry of the catalog."""
    return name in _BY_NAME


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


def resolve(text: str) -> Candidate:
    """A catalog name, a transform call or a formula -> a validated :class:`Candidate`, cached.

    The parsing is :func:`normfree.search_space.resolver.resolve` without stored names (use that
    with a ``Stored`` lookup to accept stored user candidates too)."""
    if not isinstance(text, str):
        raise ExpressionError("expected text")
    key = text.strip()
    if key in _BY_NAME:
        return get(key)
    if key in _BASELINES:
        raise ExpressionError(f"{key!r} is a baseline (a reference module), not a formula")
    if key in _RESOLVED:
        return _RESOLVED[key]
    from normfree.search_space import resolver

    cand = resolver.resolve(key)  # no stored names: the catalog's own texts and formulas
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
    "has",
    "is_baseline",
    "names",
    "resolve",
    "search16",
]
