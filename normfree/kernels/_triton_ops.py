"""Host launchers for the generated Triton kernels (grid and block choices live here).

Tile shapes: BLOCK_N covers up to 1024 columns (a power of two, at least 16), BLOCK_M fills the
tile to about 4096 elements, so every program moves 16 KiB of fp32 (8 KiB of bf16) per tensor
with 16-byte vector accesses. The backward uses P row groups, enough to fill the device about four
times over (or a handful under the interpreter, where each program costs Python time), and its
per-program fp32 partials ``[P, D]`` are summed here, in a fixed order.
"""

from __future__ import annotations

from types import ModuleType

import torch
import triton
from torch import Tensor

from normfree.kernels._torch_ops import NormParams

TILE_ELEMENTS = 4096
MAX_BLOCK_N = 1024


def as_rows(t: Tensor) -> Tensor:
    """A 2-D ``[M, D]`` view with unit column stride (copies only when that is impossible)."""
    if t.dim() == 0:
        raise ValueError("pointwise_norm needs an input with a channel dimension")
    if t.stride(-1) != 1:
        t = t.contiguous()
    rows = t.reshape(-1, t.shape[-1])
    if rows.shape[0] > 1 and rows.stride(1) != 1:
        rows = rows.contiguous()
    return rows


def blocks(d: int) -> tuple[int, int]:
    block_n = min(max(triton.next_power_of_2(d), 16), MAX_BLOCK_N)
    return max(1, TILE_ELEMENTS // block_n), block_n


def _placeholder(x: Tensor) -> Tensor:
    return torch.empty(1, device=x.device, dtype=torch.float32)


def forward(module: ModuleType, x: Tensor, p: NormParams) -> Tensor:
    alpha, s, gamma, beta = p
    rows = as_rows(x)
    m, d = rows.shape
    y = torch.empty((m, d), device=x.device, dtype=x.dtype)
    if m == 0 or d == 0:
        return y.view(x.shape)
    block_m, block_n = blocks(d)
    grid = (triton.cdiv(m, block_m), triton.cdiv(d, block_n))
    dummy = _placeholder(x)
    module._fwd_kernel[grid](
        rows, y, alpha, s if s is not None else dummy,
        gamma if gamma is not None else dummy, beta if beta is not None else dummy,
        m, d, rows.stride(0), y.stride(0),
        HAS_S=s is not None, S_PER_CHANNEL=p.s_per_channel,
        HAS_AFFINE=gamma is not None, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=4,
    )  # fmt: skip
    return y.view(x.shape)


def _row_groups(x: Tensor, m: int, block_m: int, col_blocks: int) -> int:
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        target = max(1, 4 * sms // col_blocks)
    else:  # the interpreter: a few programs, each a numpy pass
        target = 4
    return max(1, min(target, triton.cdiv(m, block_m)))


def backward(
    module: ModuleType, dy: Tensor, x: Tensor, p: NormParams
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """(dx, d_alpha, d_s, d_gamma, d_beta); parameter grads in fp32, finished on the host."""
    alpha, s, gamma, _ = p
    rows = as_rows(x)
    drows = as_rows(dy)
    m, d = rows.shape
    dx = torch.empty((m, d), device=x.device, dtype=x.dtype)
    block_m, block_n = blocks(d)
    col_blocks = triton.cdiv(d, block_n)
    groups = _row_groups(x, m, block_m, col_blocks)
    rows_per_program = triton.cdiv(triton.cdiv(max(m, 1), groups), block_m) * block_m
    groups = max(1, triton.cdiv(m, rows_per_program))
    partial = torch.zeros((4, groups, d), device=x.device, dtype=torch.float32)
    if m > 0 and d > 0:
        dummy = _placeholder(x)
        module._bwd_kernel[(groups, col_blocks)](
            rows, drows, dx, alpha, s if s is not None else dummy,
            gamma if gamma is not None else dummy,
            partial[0], partial[1], partial[2], partial[3],
            m, d, rows.stride(0), drows.stride(0), dx.stride(0), rows_per_program,
            HAS_S=s is not None, S_PER_CHANNEL=p.s_per_channel,
            HAS_AFFINE=gamma is not None, BLOCK_M=block_m, BLOCK_N=block_n,
            num_warps=4,
        )  # fmt: skip
    per_column = partial.sum(dim=1)  # [4, D], a fixed-order reduction over the P groups
    d_alpha = per_column[0].sum()
    d_s = None
    if s is not None:
        d_s = per_column[1] if p.s_per_channel else per_column[1].sum()
    d_gamma = per_column[2] if gamma is not None else None
    return dx.view(x.shape), d_alpha, d_s, d_gamma, per_column[3]
