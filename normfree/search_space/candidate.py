"""``Candidate``: one pointwise function f(u) with everything the other layers need to know.

Built only here (by :func:`parse`, the catalog and the transforms), always through
:func:`build_candidate`, so every candidate in the system has passed the same checks: the
expression language limits, the kernel node set, the domain rule and the exact derivative.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import sympy
from pydantic import BaseModel, ConfigDict

from normfree.search_space._derivative import kernel_safe_derivative, kink_points
from normfree.search_space._domain import check_domain
from normfree.search_space._numeric import disallowed_nodes
from normfree.search_space._parser import U, parse_expr_text
from normfree.search_space.errors import ExpressionError
from normfree.search_space.printed_size import check_cost

if TYPE_CHECKING:
    import numpy as np
    import torch

    from normfree.search_space.properties import Properties


def format_param(value: float) -> str:
    """Shortest text that reads back as the same float (0.5, -2, 0.01)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


class TransformStep(BaseModel):
    """One transform applied to a function, with its parameters (in call order)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    transform: str
    params: dict[str, float] = {}

    def call(self, inner: str) -> str:
        args = [inner, *(format_param(v) for v in self.params.values())]
        return f"{self.transform}({', '.join(args)})"


class Lineage(BaseModel):
    """Where a candidate came from: a base function and the ordered transforms applied to it.

    ``base`` is a catalog name, or the candidate's own name for a user formula (``formula`` set).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str
    formula: str | None = None
    steps: tuple[TransformStep, ...] = ()

    @property
    def call(self) -> str:
        """The text ``catalog.resolve`` turns back into the candidate (``sign_flip(erf)``)."""
        text = self.base
        for step in self.steps:
            text = step.call(text)
        return text


@dataclass(frozen=True, eq=False)
class Candidate:
    """A validated pointwise function f(u) in the symbol :data:`U`.

    ``expr`` and ``derivative`` contain only the kernel node set (see the package docstring);
    ``derivative`` is exact and finite everywhere. ``canonical``, ``fingerprint`` and
    ``properties`` are computed on first use and then kept (they cost milliseconds to a second).
    Two candidates are equal when their names and canonical forms are.
    """

    name: str
    formula: str
    expr: sympy.Expr
    derivative: sympy.Expr
    lineage: Lineage
    group: str = "user"
    citation: str = ""
    description: str = ""
    kinks: tuple[float, ...] = field(default=())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidate):
            return NotImplemented
        return self.name == other.name and self.canonical == other.canonical

    def __hash__(self) -> int:
        return hash((self.name, self.canonical))

    def __repr__(self) -> str:
        return f"Candidate(name={self.name!r}, expr={self.expr})"

    @cached_property
    def canonical(self) -> str:
        from normfree.search_space.dedup import canonical_form

        return canonical_form(self.expr)

    @cached_property
    def fingerprint(self) -> str:
        from normfree.search_space.dedup import fingerprint

        return fingerprint(self.expr)

    @cached_property
    def properties(self) -> Properties:
        from normfree.search_space.properties import compute_properties

        return compute_properties(self)

    # -- numerics ---------------------------------------------------------------------------
    def __call__(self, x: torch.Tensor | np.ndarray | float) -> Any:
        """f(x), vectorised, in the input's library and dtype (torch or numpy)."""
        from normfree.search_space.evaluation import evaluate

        return evaluate(self, x)

    def torch_fn(self, derivative: bool = False):
        """A plain function ``tensor -> tensor`` computing f (or f') elementwise."""
        from normfree.search_space.evaluation import torch_fn

        return torch_fn(self, derivative=derivative)

    @functools.cached_property
    def expr_text(self) -> str:
        """``str(expr)``, printed once: sympy's printer cost more than the rest of an API
        answer for a known formula (a resubmission reuses its parsed candidate)."""
        return str(self.expr)

    @functools.cached_property
    def derivative_text(self) -> str:
        """``str(derivative)``, printed once (see :attr:`expr_text`)."""
        return str(self.derivative)

    def to_dict(self, with_properties: bool = True) -> dict[str, Any]:
        """JSON-ready summary (CLI ``--json``, API, storage)."""
        out: dict[str, Any] = {
            "name": self.name,
            "formula": self.formula,
            "expr": self.expr_text,
            "derivative": self.derivative_text,
            "canonical": self.canonical,
            "fingerprint": self.fingerprint,
            "lineage": self.lineage.model_dump(mode="json"),
            "group": self.group,
            "citation": self.citation,
            "description": self.description,
        }
        if with_properties:
            out["properties"] = self.properties.model_dump(mode="json")
        return out

    def model_dump(self, *, mode: str = "python", with_properties: bool = True, **_: Any) -> dict:
        """Alias of :meth:`to_dict` (always JSON-ready), for code that expects pydantic."""
        return self.to_dict(with_properties=with_properties)

    def operator(self, *, shift: bool = True, affine: bool = True) -> sympy.Expr:
        """The operator of science.md section 1 in symbols: gamma * f(alpha*x + s) + beta.

        ``alpha``, ``s`` are per-layer scalars (``s`` absent without a shift, as in DyT);
        ``gamma``, ``beta`` per-channel (absent without affine, as in DiT's norms).
        """
        x, alpha, s, gamma, beta = sympy.symbols("x alpha s gamma beta", real=True)
        inner = alpha * x + (s if shift else 0)
        f = self.expr.xreplace({U: inner})
        return gamma * f + beta if affine else f


def build_candidate(
    expr: sympy.Expr,
    *,
    name: str,
    formula: str,
    lineage: Lineage,
    group: str = "user",
    citation: str = "",
    description: str = "",
) -> Candidate:
    """Validate ``expr`` (node set, domain) and attach its kernel-safe derivative."""
    if isinstance(expr, int | float) and not isinstance(expr, bool):
        expr = sympy.Integer(expr) if isinstance(expr, int) else sympy.Float(expr)
    if not isinstance(expr, sympy.Expr):
        raise ExpressionError("a formula must be a real-valued expression")
    if expr.free_symbols - {U}:
        raise ExpressionError(f"unknown symbols {sorted(map(str, expr.free_symbols - {U}))}")
    bad = disallowed_nodes(expr)
    if bad:
        raise ExpressionError(
            f"the formula is undefined or uses unsupported operations ({', '.join(bad)}); "
            "constant sub-expressions must be finite and real"
        )
    # Printed size first: a power tower is one sympy node but billions of printed operations.
    check_cost(expr)
    derivative = kernel_safe_derivative(expr)
    bad = disallowed_nodes(derivative)
    if bad:
        raise ExpressionError(f"the derivative uses unsupported operations ({', '.join(bad)})")
    check_cost(derivative, "its derivative")
    kinks = tuple(sorted({float(c) for c in [*kink_points(expr), *kink_points(derivative)]}))
    check_domain(expr, derivative, list(kinks))
    return Candidate(
        name=name,
        formula=formula,
        expr=expr,
        derivative=derivative,
        lineage=lineage,
        group=group,
        citation=citation,
        description=description,
        kinks=kinks,
    )


def parse(text: str, name: str | None = None) -> Candidate:
    """Parse a user formula into a validated :class:`Candidate`.

    ``name`` defaults to the formula text itself. Raises :class:`ExpressionError` with a reason
    (and a character position for syntax and limit errors).
    """
    expr = parse_expr_text(text)
    formula = text.strip()
    cname = name if name is not None else formula
    return build_candidate(
        expr,
        name=cname,
        formula=formula,
        lineage=Lineage(base=cname, formula=formula),
    )
