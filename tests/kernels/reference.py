"""The pure-torch reference operator, shared by the tests and bench/bench_kernels_*.py.

Written independently of ``search_space`` and of the printers: each function is the formula of
science.md sections 2-3 typed by hand in plain torch, differentiated by autograd. The tests compare
the generated kernels against it in float64; the CPU benchmark times it (in fp32) as the "naive
eager" operator, the way the paper's code computes Derf. One definition, so the two cannot drift.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

Fn = Callable[[Tensor], Tensor]


def _clip(v: Tensor, lam: float = 1.0) -> Tensor:
    return torch.clamp(v, -lam, lam)


def _logsign(u: Tensor) -> Tensor:
    return torch.sign(u) * torch.log(u.abs() + 1)


def _saturlog(u: Tensor) -> Tensor:
    lg = torch.log(u.abs() + 1)
    return lg / (lg + 1) * torch.sign(u)


def _arctan(u: Tensor) -> Tensor:
    return 2 / math.pi * torch.atan(u)


def _flat_centre(f: Fn, lam: float) -> Fn:
    return lambda u: torch.where(u.abs() <= lam, torch.zeros_like(u), f(u - lam * torch.sign(u)))


# Every catalog entry, by name (science.md section 2, and the section 3 base functions).
CATALOG: dict[str, Fn] = {
    "erf": torch.erf,
    "tanh": torch.tanh,
    "arctan": _arctan,
    "satursin": lambda u: torch.sin(torch.clamp(u, -math.pi / 2, math.pi / 2)),
    "expsign": lambda u: torch.sign(u) * (1 - torch.exp(-u.abs())),
    "exproot": lambda u: torch.sign(u) * (1 - torch.exp(-torch.sqrt(u.abs()))),
    "relsign": lambda u: u / (torch.sqrt(u**2 + 1) + 1),
    "isru": lambda u: u / torch.sqrt(u**2 + 1),
    "cubsign": lambda u: u**3 / (u.abs() ** 3 + 1),
    "logsignclip": lambda u: _clip(_logsign(u)),
    "logquadclip": lambda u: _clip(torch.sign(u) * torch.log(u**2 + 1)),
    "arcsinhclip": lambda u: _clip(torch.asinh(u)),
    "power23clip": lambda u: _clip(torch.sign(u) * u.abs() ** (2 / 3)),
    "linearclip": _clip,
    "smoothsign": lambda u: u / (1 + u.abs()),
    "saturlog": _saturlog,
    "linear": lambda u: u,
    "power23": lambda u: torch.sign(u) * u.abs() ** (2 / 3),
    "logsign": _logsign,
    "logquad": lambda u: torch.sign(u) * torch.log(u**2 + 1),
    "asinh": torch.asinh,
    "sin": torch.sin,
    "dampx": lambda u: 2 * u / (1 + u**2),
    "dampexp": lambda u: 2.72 * u * torch.exp(-u.abs()),
}

# A sample of transforms (science.md section 3) as search_space spells them.
TRANSFORMS: dict[str, Fn] = {
    "shift_h(erf, 0.5)": lambda u: torch.erf(u + 0.5),
    "shift_v(tanh, -0.1)": lambda u: torch.tanh(u) - 0.1,
    "clip(asinh, 2)": lambda u: _clip(torch.asinh(u), 2.0),
    "linear_part(erf, 0.1)": lambda u: 0.9 * torch.erf(u) + 0.1 * u,
    "flat_centre(tanh, 0.5)": _flat_centre(torch.tanh, 0.5),
    "sign_flip(arctan)": lambda u: -_arctan(u),
}

# User formulas that exercise the printers' other rules (erfc, sinh/cosh, general powers, cos,
# Min/Max, Piecewise from abs/sign).
FORMULAS: dict[str, Fn] = {
    "u/(1+abs(u)) + 0.1*tanh(u)**3": lambda u: u / (1 + u.abs()) + 0.1 * torch.tanh(u) ** 3,
    "erfc(-u) - 1": lambda u: torch.erfc(-u) - 1,
    "sinh(u/2)/cosh(u)": lambda u: torch.sinh(u / 2) / torch.cosh(u),
    "sign(u)*abs(u)**0.7/(1 + abs(u)**0.7)": lambda u: (
        torch.sign(u) * u.abs() ** 0.7 / (1 + u.abs() ** 0.7)
    ),
    "u*cos(u)/(1+u**2)": lambda u: u * torch.cos(u) / (1 + u**2),
    "max(min(2*u, 1), -1)": lambda u: torch.clamp(2 * u, -1, 1),
}

ALL: dict[str, Fn] = {**CATALOG, **TRANSFORMS, **FORMULAS}


def reference_norm(
    x: Tensor,
    f: Fn,
    alpha: Tensor,
    s: Tensor | None = None,
    gamma: Tensor | None = None,
    beta: Tensor | None = None,
) -> Tensor:
    """gamma * f(alpha * x + s) + beta through plain autograd (no custom Function)."""
    u = alpha * x
    if s is not None:
        u = u + s
    y = f(u)
    if gamma is not None and beta is not None:
        y = gamma * y + beta
    return y


class ReferenceNorm(torch.nn.Module):
    """The same operator as an nn.Module, with PointwiseNorm's parameter names and inits."""

    def __init__(self, f: Fn, dim: int, shift: str = "scalar", alpha0: float = 0.5) -> None:
        super().__init__()
        self.f = f
        self.alpha = torch.nn.Parameter(torch.tensor(alpha0))
        self.s = (
            torch.nn.Parameter(torch.zeros(() if shift == "scalar" else (dim,)))
            if shift != "none"
            else None
        )
        self.gamma = torch.nn.Parameter(torch.ones(dim))
        self.beta = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return reference_norm(x, self.f, self.alpha, self.s, self.gamma, self.beta)
