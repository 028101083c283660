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
    y = f(shifted(x, alpha, s))
    if gamma is not None and beta is not None:
        ct = compute_dtype(x.dtype)
        y = torch.addcmul(beta.to(ct), y, gamma.to(ct))
    return y.to(x.dtype)


def shifted(x: Tensor, alpha: Tensor, s: Tensor | None) -> Tensor:
    """u = alpha * x + s in the compute dtype: one ``addcmul`` (one pass, one buffer) eagerly."""
    ct = compute_dtype(x.dtype)
    if s is None:
        return x.to(ct) * alpha.to(ct)
    return torch.addcmul(s.to(ct), x.to(ct), alpha.to(ct))


def backward_pointwise(
    f_and_df: FnDf,
    dy: Tensor,
    x: Tensor,
    alpha: Tensor,
    s: Tensor | None,
    gamma: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The elementwise half of the backward: (dx, g = dL/du, h = dy * f(u) or None).

    f and f' are recomputed from x. This is the part ``torch.compile`` fuses into one loop; the
    reductions stay in :func:`backward_reduce` because inductor's CPU code walks column sums
    (reductions over the outer dimension) row by row inside each column strip, which measured
    several times slower than ATen's own column sum over a materialised operand.
    """
    ct = compute_dtype(x.dtype)
    a = alpha.to(ct)
    fu, dfu = f_and_df(shifted(x, alpha, s))
    dyc = dy.to(ct)
    g = dyc * dfu if gamma is None else dyc * gamma.to(ct) * dfu
    h = dyc * fu if gamma is not None else None
    return g * a, g, h


def _owned(t: Tensor, *others: Tensor) -> bool:
    """True when ``t`` may be overwritten: a full-size buffer sharing memory with none of others.

    The generated ``f_and_df`` may return the same tensor twice (``exp``: f = f'), ``u`` itself
    (identity) or a broadcast constant, so in-place reuse is checked, never assumed.
    """
    if t.requires_grad or not t.is_contiguous():
        return False
    ptr = t.untyped_storage().data_ptr()
    return all(o.untyped_storage().data_ptr() != ptr for o in others)


def backward_eager(
    f_and_df: FnDf,
    dy: Tensor,
    x: Tensor,
    alpha: Tensor,
    s: Tensor | None,
    gamma: Tensor | None,
    s_per_channel: bool,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """The eager backward with as few full-size buffers and passes as ATen allows.

    Same math as :func:`backward_math`, but the temporaries returned by the generated code are
    reused in place (checked by :func:`_owned`) and dx is made from g after the reductions that
    need g, so a step allocates u, f, f' and nothing else of size M x D: fewer page faults and
    less traffic, which is most of an eager step on CPU (bench/bench_kernels_cpu.py).
    """
    if torch.is_grad_enabled():  # double backward: keep the graph-safe out-of-place version
        return backward_math(f_and_df, dy, x, alpha, s, gamma, s_per_channel)
    ct = compute_dtype(x.dtype)
    a = alpha.to(ct)
    xc = x.to(ct)
    dyc = dy.to(ct)
    fu, dfu = f_and_df(shifted(xc, a, s))
    shape = torch.broadcast_shapes(x.shape, dfu.shape)
    reuse = dfu.shape == shape and _owned(dfu, fu, xc, dyc)
    g = dfu.mul_(dyc) if reuse else dyc * dfu
    if gamma is not None:
        g = g.mul_(gamma.to(ct))
    h = None
    if gamma is not None:
        h_owned = fu.shape == shape and _owned(fu, g, xc, dyc)
        h = fu.mul_(dyc) if h_owned else dyc * fu
    d_alpha, d_s, d_gamma, d_beta = backward_reduce(dy, x, g, h, s, s_per_channel)
    return g.mul_(a), d_alpha, d_s, d_gamma, d_beta


def row_block(m: int) -> int:
    """Rows per block for :func:`backward_blocked`: the largest of 64, 32, 16, 8 dividing m."""
    return next((r for r in (64, 32, 16, 8) if m % r == 0), 0)


def backward_blocked(
    f_and_df: FnDf,
    dy: Tensor,
    x: Tensor,
    alpha: Tensor,
    s: Tensor | None,
    gamma: Tensor | None,
    block: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor]:
    """dx and ``[M / block, D]`` partial column sums of (g*x, g, dy*f, dy), for torch.compile.

    The compiled form of the whole backward when ``block`` rows divide M: reducing a short
    ``[block, D]`` strip per output row keeps inductor's column walk inside the cache, and nothing
    of size M x D but dx is written. Measured ~30% faster than pointwise + ATen reductions
    (bench/bench_kernels_cpu.py, same run); the host finishes the sums over the row blocks.
    """
    ct = compute_dtype(x.dtype)
    a = alpha.to(ct)
    xc = x.to(ct)
    fu, dfu = f_and_df(shifted(xc, a, s))
    dyc = dy.to(ct)
    g = dyc * dfu if gamma is None else dyc * gamma.to(ct) * dfu
    blocks = (-1, block, x.shape[-1])  # (M / block, block, D)
    gb = g.reshape(blocks)
    h = (dyc * fu).reshape(blocks).sum(1) if gamma is not None else None
    return g * a, (gb * xc.reshape(blocks)).sum(1), gb.sum(1), h, dyc.reshape(blocks).sum(1)


def backward_reduce(
    dy: Tensor, x: Tensor, g: Tensor, h: Tensor | None, s: Tensor | None, s_per_channel: bool
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor]:
    """(d_alpha, d_s, d_gamma, d_beta) from the pointwise half, accumulated in g's dtype."""
    ct = g.dtype
    lead = tuple(range(x.dim() - 1))
    d_alpha = torch.dot(g.reshape(-1), x.to(ct).reshape(-1))  # one pass, no g*x temporary
    d_s = None
    if s is not None:
        d_s = g.sum(dim=lead) if s_per_channel else g.sum()
    d_gamma = h.sum(dim=lead) if h is not None else None
    return d_alpha, d_s, d_gamma, dy.to(ct).sum(dim=lead)


def backward_math(
    f_and_df: FnDf,
    dy: Tensor,
    x: Tensor,
    alpha: Tensor,
    s: Tensor | None,
    gamma: Tensor | None,
    s_per_channel: bool,
    pointwise: Callable[..., tuple[Tensor, Tensor, Tensor | None]] | None = None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """(dx, d_alpha, d_s, d_gamma, d_beta) in the compute dtype.

    ``pointwise`` replaces :func:`backward_pointwise` (the compiled version of it).
    """
    if pointwise is None:
        dx, g, h = backward_pointwise(f_and_df, dy, x, alpha, s, gamma)
    else:
        dx, g, h = pointwise(dy, x, alpha, s, gamma)
    d_alpha, d_s, d_gamma, d_beta = backward_reduce(dy, x, g, h, s, s_per_channel)
    return dx, d_alpha, d_s, d_gamma, d_beta
