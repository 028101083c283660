"""The operator written plainly: ``gamma * f(alpha * x + s) + beta`` through torch autograd.

No generated code and no custom autograd Function: the tests compare every backend with it in
float64 (f from an independent source: a catalog entry's reference formula, a primitive's torch
column), and the benchmarks time it in fp32 as the "naive eager" operator, the way the papers'
code computes Derf. One definition for both, in the package, so neither reaches into the other.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Fn = Callable[[Tensor], Tensor]


def reference_norm(
    x: Tensor,
    f: Fn,
    alpha: Tensor,
    s: Tensor | None = None,
    gamma: Tensor | None = None,
    beta: Tensor | None = None,
) -> Tensor:
    """gamma * f(alpha * x + s) + beta through plain autograd."""
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


__all__ = ["ReferenceNorm", "reference_norm"]
