"""The eager CPU backward reuses the generated code's temporaries in place: prove that is safe.

``f_and_df`` may hand back one tensor twice (f = f' for exp), ``u`` itself (f(u) = u) or a
broadcast constant (f' of a linear f); each case must give the same gradients as plain autograd,
and the caller's x and dy must come back untouched.
"""

from __future__ import annotations

import pytest
import torch

from normfree.kernels import pointwise_norm
from normfree.search_space import parse

# formula -> the same function typed by hand for the float64 autograd reference
CASES = {
    "exp(u)": torch.exp,  # f and f' are the same tensor
    "u": lambda u: u,  # f is u itself, f' a constant
    "3*u": lambda u: 3 * u,  # f' a constant broadcast to u's shape
    "u*exp(u)": lambda u: u * torch.exp(u),  # shared cse temporary
    "tanh(u)": torch.tanh,
}


@pytest.mark.parametrize("formula", list(CASES))
@pytest.mark.parametrize("shift", ["none", "scalar", "channel"])
@pytest.mark.parametrize("affine", [True, False])
def test_eager_backward_matches_autograd_and_keeps_inputs(formula, shift, affine) -> None:
    candidate = parse(formula)
    gen = torch.Generator().manual_seed(1)
    m, d = 37, 19
    x = torch.randn(m, d, generator=gen).clamp(-2, 2)
    dy = torch.randn(m, d, generator=gen)
    params = [torch.tensor(0.7)]
    params.append(None if shift == "none" else 0.1 * torch.randn(() if shift == "scalar" else d))
    params += [1 + 0.1 * torch.randn(d), 0.1 * torch.randn(d)] if affine else [None, None]
    x0, dy0 = x.clone(), dy.clone()

    leaves = [x.requires_grad_(), *(p.requires_grad_() for p in params if p is not None)]
    y = pointwise_norm(x, candidate, *params, backend="torch")
    grads = torch.autograd.grad(y, leaves, dy)
    assert torch.equal(x.detach(), x0) and torch.equal(dy, dy0)

    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    it = iter(ref_leaves[1:])
    a, s, gamma, beta = (next(it) if p is not None else None for p in params)
    u = a * ref_leaves[0] + (s if s is not None else 0)
    y_ref = CASES[formula](u)
    if gamma is not None:
        y_ref = gamma * y_ref + beta
    grads_ref = torch.autograd.grad(y_ref, ref_leaves, dy.double())
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * m * d)
