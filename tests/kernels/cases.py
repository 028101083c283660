"""Every function the operator tests run, each with an independent float64 reference.

- every catalog entry: its reference formula (``Entry.reference``, science.md's text);
- every primitive: its row's example formula, evaluated through the torch columns of the
  primitives table (so a helper a printer writes is checked against the library function, or
  the torch helper, the row names), except where a catalog entry already runs the same formula;
- a sample of transforms (science.md section 3) and formulas for the printers' structural rules
  (general powers, Min/Max, Piecewise), typed here by hand.

All three families come from their tables: a new entry or primitive is covered without an edit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from normfree.search_space import catalog
from normfree.search_space._numeric import evaluate_array
from normfree.search_space._parser import parse_expr_text
from normfree.search_space.primitives import PRIMITIVES
from tests.references import reference

Fn = Callable[[Tensor], Tensor]


def _through_torch_columns(formula: str) -> Fn:
    expr = parse_expr_text(formula)
    return lambda u: evaluate_array(expr, u)


def _clip(v: Tensor, lam: float = 1.0) -> Tensor:
    return torch.clamp(v, -lam, lam)


def _arctan(u: Tensor) -> Tensor:
    return 2 / math.pi * torch.atan(u)


def _flat_centre(f: Fn, lam: float) -> Fn:
    return lambda u: torch.where(u.abs() <= lam, torch.zeros_like(u), f(u - lam * torch.sign(u)))


CATALOG: dict[str, Fn] = {e.name: reference(e.name, "torch") for e in catalog.ENTRIES}

_ENTRY_FORMULAS = {e.formula for e in catalog.ENTRIES}
PRIMITIVE_CASES: dict[str, Fn] = {
    p.formula: _through_torch_columns(p.formula)
    for p in PRIMITIVES
    if p.formula not in _ENTRY_FORMULAS
}

TRANSFORMS: dict[str, Fn] = {
    "shift_h(erf, 0.5)": lambda u: torch.erf(u + 0.5),
    "shift_v(tanh, -0.1)": lambda u: torch.tanh(u) - 0.1,
    "clip(asinh, 2)": lambda u: _clip(torch.asinh(u), 2.0),
    "linear_part(erf, 0.1)": lambda u: 0.9 * torch.erf(u) + 0.1 * u,
    "flat_centre(tanh, 0.5)": _flat_centre(torch.tanh, 0.5),
    "sign_flip(arctan)": lambda u: -_arctan(u),
}

# The printers' own rules: shared cse work, general and negative powers, Min/Max, abs/sign.
STRUCTURE: dict[str, Fn] = {
    "u/(1+abs(u)) + 0.1*tanh(u)**3": lambda u: u / (1 + u.abs()) + 0.1 * torch.tanh(u) ** 3,
    "sinh(u/2)/cosh(u)": lambda u: torch.sinh(u / 2) / torch.cosh(u),
    "sign(u)*abs(u)**0.7/(1 + abs(u)**0.7)": lambda u: (
        torch.sign(u) * u.abs() ** 0.7 / (1 + u.abs() ** 0.7)
    ),
    "u*cos(u)/(1+u**2)": lambda u: u * torch.cos(u) / (1 + u**2),
    "max(min(2*u, 1), -1)": lambda u: torch.clamp(2 * u, -1, 1),
}

ALL: dict[str, Fn] = {**CATALOG, **PRIMITIVE_CASES, **TRANSFORMS, **STRUCTURE}
