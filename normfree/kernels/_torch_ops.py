"""The CPU path: operator math over the generated torch ``f`` / ``f_and_df``.

Forward and backward are written once here, generic in ``f``; the candidate enters only through
the generated functions. Math runs in fp32 (fp64 for fp64 inputs, so gradcheck is meaningful)
and nothing but x is saved: backward recomputes u, f(u) and f'(u).

``fused`` wraps both in ``torch.compile`` (inductor's C++ backend fuses the pointwise chain and the
column reductions into a couple of loops); ``eager`` runs them as written. Which one ``auto``
picks is decided in :mod:`normfree.kernels._ops` from the benchmark (bench/bench_kernels_cpu.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Fn = Callable[[Tensor], Tensor]
FnDf = Callable[[Tensor], tuple[Tensor, Tensor]]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half types and fp32, fp64 for fp64."""
    return torch.promote_types(dtype, torch.float32)


def forward_math(
    f: Fn, x: Tensor, alpha: Tensor, s: Tensor | None, gamma: Tensor | None, beta: Tensor | None
) -> Tensor:
    """y = gamma * f(alpha * x + s) + beta, computed in fp32, returned in x's dtype."""
    ct = compute_dtype(x.dtype)
    u = x.to(ct) * alpha.to(ct)
    if s is not None:
        u = u + s.to(ct)
    y = f(u)
    if gamma is not None and beta is not None:
        y = torch.addcmul(beta.to(ct), y, gamma.to(ct))
    return y.to(x.dtype)


def backward_math(
    f_and_df: FnDf,
    dy: Tensor,
    x: Tensor,
    alpha: Tensor,
    s: Tensor | None,
    gamma: Tensor | None,
    s_per_channel: bool,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """(dx, d_alpha, d_s, d_gamma, d_beta) in the compute dtype; f recomputed from x."""
    ct = compute_dtype(x.dtype)
    xc = x.to(ct)
    dyc = dy.to(ct)
    a = alpha.to(ct)
    u = xc * a
    if s is not None:
        u = u + s.to(ct)
    fu, dfu = f_and_df(u)
    g = dyc * dfu if gamma is None else dyc * gamma.to(ct) * dfu  # dL/du
    dx = g * a
    lead = tuple(range(x.dim() - 1))
    d_alpha = (g * xc).sum()
    d_s = None
    if s is not None:
        d_s = g.sum(dim=lead) if s_per_channel else g.sum()
    d_gamma = (dyc * fu).sum(dim=lead) if gamma is not None else None
    d_beta = dyc.sum(dim=lead)
    return dx, d_alpha, d_s, d_gamma, d_beta
