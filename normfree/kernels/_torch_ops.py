"""The CPU path: operator math over the generated torch ``f`` / ``f_and_df``.

Forward and backward are written once here, generic in ``f``; the candidate enters only through
the generated functions. Math runs in fp32 (fp64 for fp64 inputs, so gradcheck is meaningful)
and nothing but x is saved: backward recomputes u, f(u) and f'(u).

Eager (``backend="torch"``): :func:`forward_math` and :func:`backward_eager` (ATen ops, the
generated temporaries reused in place). Compiled (``backend="compile"``): ``torch.compile`` of
:func:`forward_math` (one loop: read x, write y) and of :func:`backward_fused` (one loop: read x
and dy, write dx and h, row sums in registers) plus two ATen column sums. Which one ``auto`` picks
is decided in :mod:`normfree.kernels._ops` from the benchmark (bench/bench_kernels_cpu.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

Fn = Callable[[Tensor], Tensor]
FnDf = Callable[[Tensor], tuple[Tensor, Tensor]]


class NormParams(NamedTuple):
    """The operator's parameters besides x, in y = gamma * f(alpha * x + s) + beta: alpha 0-d,
    s 0-d, ``[D]`` or None, gamma and beta ``[D]`` or None (together). One record for every
    backend's launcher, so what a backend receives, and how it reads s's shape, is said once."""

    alpha: Tensor
    s: Tensor | None
    gamma: Tensor | None
    beta: Tensor | None

    @property
    def s_per_channel(self) -> bool:
        return self.s is not None and self.s.dim() == 1


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
    """u = alpha * x + s in the compute dtype, into one fresh buffer.

    ``(x * alpha).add_(s)`` rather than ``addcmul(s, x, alpha)``: ATen's addcmul with a 0-d
    ``s`` as its broadcast base measured ~2x slower than the two ops (a per-channel ``s`` is as
    fast either way); the in-place add reuses the product's buffer (fresh, so safe for autograd).
    """
    ct = compute_dtype(x.dtype)
    u = x.to(ct) * alpha.to(ct)
    return u if s is None else u.add_(s.to(ct))


def backward_pointwise(
    f_and_df: FnDf, dy: Tensor, x: Tensor, p: NormParams
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The elementwise half of the backward: (dx, g = dL/du, h = dy * f(u) or None).

    f and f' are recomputed from x; the out-of-place reference form of the eager backward
    (used when the backward itself is differentiated, where in-place reuse is not allowed).
    """
    alpha, s, gamma, _ = p
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
    f_and_df: FnDf, dy: Tensor, x: Tensor, p: NormParams
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """The eager backward with as few full-size buffers and passes as ATen allows.

    Same math as :func:`backward_pointwise` then :func:`backward_reduce` (which it runs itself
    when the backward is differentiated), but the temporaries returned by the generated code are
    reused in place (checked by :func:`_owned`) and dx is made from g after the reductions that
    need g, so a step allocates u, f, f' and nothing else of size M x D: fewer page faults and
    less traffic, which is most of an eager step on CPU (bench/bench_kernels_cpu.py).
    """
    alpha, s, gamma, s_per_channel = p.alpha, p.s, p.gamma, p.s_per_channel
    if torch.is_grad_enabled():  # double backward: keep the graph-safe out-of-place version
        dx, g, h = backward_pointwise(f_and_df, dy, x, p)
        return dx, *backward_reduce(dy, x, g, h, s, s_per_channel)
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


def backward_fused(
    f_and_df: FnDf,
    dy: Tensor,
    x: Tensor,
    alpha: Tensor,
    s: Tensor | None,
    gamma: Tensor | None,
    s_per_channel: bool,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """The backward as ``torch.compile`` fuses it into ONE pass over ``[M, D]`` views of x, dy.

    Returns (dx, row sums of g*x, row sums of g or g itself, h = dy * f(u) or None): the
    pointwise half (:func:`backward_pointwise`, traced into the same graph) and the row sums.
    Every reduction here runs along the contiguous last dimension, the one shape of reduction that
    inductor's C++ backend fuses with the elementwise outputs it shares a loop with: one loop
    reads x and dy, recomputes u, f, f', stores dx and h and keeps the two row sums in registers.
    The column sums (d_gamma, d_beta, per-channel d_s) are left to ATen over h and dy on the
    host: inductor does not fuse a reduction over rows with a full-size store (it materialises
    g and walks it again), which measured ~15% slower for the whole backward than this split
    (bench/bench_kernels_cpu.py; the blocked variant it replaces: dx and [M/64, D] partials).
    """
    dx, g, h = backward_pointwise(f_and_df, dy, x, NormParams(alpha, s, gamma, None))
    g_out = g if s is not None and s_per_channel else g.sum(-1)
    return dx, (g * x.to(g.dtype)).sum(-1), g_out, h


def finish_fused(
    parts: tuple[Tensor, Tensor, Tensor | None, Tensor | None],
    dy: Tensor,
    s: Tensor | None,
    s_per_channel: bool,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """(dx, d_alpha, d_s, d_gamma, d_beta) from :func:`backward_fused`'s outputs (2-D views)."""
    dx, row_gx, g_out, h = parts
    d_s = None
    if s is not None and g_out is not None:
        d_s = g_out.sum(0) if s_per_channel else g_out.sum()
    d_gamma = h.sum(0) if h is not None else None
    return dx, row_gx.sum(), d_s, d_gamma, dy.to(row_gx.dtype).sum(0)


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
