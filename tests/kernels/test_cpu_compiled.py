"""The compiled CPU path (``backend="compile"``) over the operator's variants and input layouts.

The compiled backward is one fused loop with row sums plus ATen column sums on the host
(``_torch_ops.backward_fused``): every gradient, including per-channel d_s and the no-affine and
no-shift forms, must match a float64 autograd reference, for any row count (no row blocking), for
N-d, non-contiguous and bf16 inputs. A handful of variants only: each costs a compile.
"""

from __future__ import annotations

import pytest
import torch

from normfree.kernels import pointwise_norm
from normfree.kernels.reference import reference_norm
from normfree.search_space import catalog

VARIANTS = [  # (shift, affine, shape, dtype, transposed)
    ("channel", True, (3, 7, 257), torch.float32, False),
    ("none", False, (37, 64), torch.float32, True),
    ("scalar", True, (5, 11, 48), torch.bfloat16, False),
]


@pytest.mark.parametrize(("shift", "affine", "shape", "dtype", "transposed"), VARIANTS)
def test_compiled_variants_match_float64_autograd(shift, affine, shape, dtype, transposed) -> None:
    gen = torch.Generator().manual_seed(3)
    d = shape[-1]
    x = 1.5 * torch.randn(shape, generator=gen)
    if transposed:  # a non-contiguous input with the same logical shape
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
        assert not x.is_contiguous()
    x = x.to(dtype).requires_grad_()
    dy = torch.randn(shape, generator=gen).to(dtype)
    params = [torch.tensor(0.6)]
    params.append(None if shift == "none" else 0.2 * torch.randn(() if shift == "scalar" else d))
    params += [1 + 0.1 * torch.randn(d), 0.1 * torch.randn(d)] if affine else [None, None]
    leaves = [x, *(p.requires_grad_() for p in params if p is not None)]

    y = pointwise_norm(x, catalog.get("erf"), *params, backend="compile")
    grads = torch.autograd.grad(y, leaves, dy)

    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    it = iter(ref_leaves[1:])
    ref_params = [next(it) if p is not None else None for p in params]
    y_ref = reference_norm(ref_leaves[0], torch.erf, *ref_params)
    grads_ref = torch.autograd.grad(y_ref, ref_leaves, dy.double())
    assert y.dtype == dtype and y.shape == x.shape
    half = dtype != torch.float32
    tol = 1e-2 if half else 2e-5
    torch.testing.assert_close(y.double(), y_ref, rtol=tol, atol=tol)
    rows = x.numel() // d
    for i, (got, want) in enumerate(zip(grads, grads_ref, strict=True)):
        assert got.shape == want.shape and got.dtype == leaves[i].dtype
        terms = 1 if i == 0 else rows if got.dim() == 1 else x.numel()
        atol = (1e-2 if half else 2e-5) * terms**0.5
        torch.testing.assert_close(got.double(), want, rtol=tol * 10, atol=atol)
