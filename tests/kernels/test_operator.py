"""The operator contract, for every catalog entry, every primitive, a sample of transforms and
the printers' structural rules (``cases.py``).

Each case runs through the generated Triton kernels (interpreter), the generated C (native CPU
path) and the generated torch code, and is compared with its float64 autograd reference: the
forward and all five gradients (x, alpha, s, gamma, beta).
"""

from __future__ import annotations

import pytest
import torch

from normfree.kernels import PointwiseNorm, pointwise_norm
from normfree.kernels.reference import ReferenceNorm, reference_norm
from normfree.search_space import catalog
from tests.kernels.cases import ALL, CATALOG

# numpy warnings from the interpreter evaluating both sides of tl.where (log(0) in the unused side)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

BACKENDS = ["triton", "native", "torch"]


def _params(d: int, shift: str, affine: bool, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    alpha = torch.tensor(0.8, dtype=dtype)
    s = None
    if shift == "scalar":
        s = torch.tensor(0.3, dtype=dtype)
    elif shift == "channel":
        s = (0.3 * torch.randn(d, generator=gen)).to(dtype)
    gamma = beta = None
    if affine:
        gamma = (1 + 0.5 * torch.randn(d, generator=gen)).to(dtype)
        beta = (0.5 * torch.randn(d, generator=gen)).to(dtype)
    return alpha, s, gamma, beta


KINKS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)  # u where some case's slope jumps or blows up


def _away_from_zero(x: torch.Tensor, params) -> torch.Tensor:
    """Move x off |u - k| < 0.01 for the kinks k above. Near 0, exproot/power23 have slopes
    ~1/sqrt|u|, so fp32-vs-fp64 rounding of u itself (not the kernel) dominates; at a clip
    corner the two sides' slopes differ. u = 0 exactly has its own test below."""
    alpha, s = params[0].double(), params[1]
    for _ in range(3):
        u = alpha * x.double() + (s.double() if s is not None else 0.0)
        near = torch.zeros_like(u, dtype=torch.bool)
        for k in KINKS:
            near |= (u - k).abs() < 0.01
        x = torch.where(near, (x.double() + 0.05).to(x.dtype), x)
    return x


def _run(fn, x, params, dy):
    """Forward and the gradients of every tensor that requires grad."""
    leaves = [x, *[p for p in params if p is not None]]
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    it = iter(leaves[1:])
    rebuilt = [next(it) if p is not None else None for p in params]
    y = fn(leaves[0], *rebuilt)
    grads = torch.autograd.grad(y, leaves, dy)
    return y.detach(), grads


def _check(name: str, backend: str, shape, shift="scalar", affine=True, seed=0):
    candidate = catalog.resolve(name)
    d = shape[-1]
    gen = torch.Generator().manual_seed(seed)
    x = 2 * torch.randn(shape, generator=gen)
    dy = torch.randn(shape, generator=gen)
    params = _params(d, shift, affine, torch.float32, seed)
    x = _away_from_zero(x, params)

    def ours(x, *p):
        return pointwise_norm(x, candidate, *p, backend=backend)

    def ref(x, *p):
        return reference_norm(x, ALL[name], *p)

    y, grads = _run(ours, x, params, dy)
    p64 = [p.double() if p is not None else None for p in params]
    y_ref, grads_ref = _run(ref, x.double(), p64, dy.double())
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=2e-5)
    rows = x.numel() // d
    labels = ["dx", "d_alpha", *(["d_s"] if shift != "none" else [])]
    labels += ["d_gamma", "d_beta"] if affine else []
    assert len(labels) == len(grads) == len(grads_ref), labels
    for label, got, want in zip(labels, grads, grads_ref, strict=True):
        got = got.double()
        assert got.dtype == want.dtype and got.shape == want.shape, label
        # per-element grads: fp32 rounding; sums over rows or all elements: looser, scaled by
        # the number of terms (the scalar ones are the big reductions)
        terms = 1 if label == "dx" else rows if got.dim() == 1 else x.numel()
        atol = 2e-5 * terms**0.5
        torch.testing.assert_close(
            got, want, rtol=2e-4, atol=atol, msg=lambda m, lb=label: f"{name} {lb}: {m}"
        )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ALL))
def test_matches_float64_reference(name: str, backend: str, interpreter) -> None:
    _check(name, backend, (3, 7, 257))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("name", "shape", "shift", "affine"),
    [
        ("erf", (1, 1, 1023), "none", True),
        ("erf", (1, 1, 1023), "channel", True),
        ("tanh", (3, 7, 257), "channel", False),
        ("flat_centre(tanh, 0.5)", (1, 1, 1023), "scalar", False),
        ("power23clip", (5, 1, 17), "none", False),
        ("arctan", (1, 1), "scalar", True),
    ],
)
def test_variants_and_odd_shapes(name, shape, shift, affine, backend, interpreter) -> None:
    _check(name, backend, shape, shift, affine)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["erf", "tanh", "arctan", "exproot", "linearclip"])
def test_half_precision_inputs(name: str, dtype: torch.dtype, backend: str, interpreter) -> None:
    """bf16/fp16 x and dy; fp32 parameters get fp32 grads, x gets a grad in its own dtype.

    The reference sees the same rounded inputs in float64. The interpreter truncates fp32 to bf16
    where compiled code rounds to nearest: outputs may be one ulp of the output dtype off.
    """
    candidate = catalog.resolve(name)
    gen = torch.Generator().manual_seed(1)
    params = _params(96, "scalar", True, torch.float32)
    x = _away_from_zero((2 * torch.randn(4, 33, 96, generator=gen)).to(dtype), params)
    dy = torch.randn(4, 33, 96, generator=gen).to(dtype)
    y, grads = _run(lambda x, *p: pointwise_norm(x, candidate, *p, backend=backend), x, params, dy)
    p64 = [p.double() for p in params]
    y_ref, grads_ref = _run(lambda x, *p: reference_norm(x, ALL[name], *p), x.double(), p64,
                            dy.double())  # fmt: skip
    assert y.dtype == dtype and grads[0].dtype == dtype
    assert all(g.dtype == torch.float32 for g in grads[1:])
    ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
    torch.testing.assert_close(y.double(), y_ref, rtol=ulp, atol=1e-3)
    torch.testing.assert_close(grads[0].double(), grads_ref[0], rtol=ulp, atol=1e-3)
    for got, want in zip(grads[1:], grads_ref[1:], strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=1e-3 * x.numel() ** 0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs(backend: str, interpreter) -> None:
    """A transposed x, a column slice of a wider tensor, and an expanded upstream gradient."""
    candidate = catalog.get("erf")
    base = torch.randn(40, 3, 80)
    views = [base.transpose(0, 1), base[:, :, 5:69]]
    for x in views:
        d = x.shape[-1]
        params = _params(d, "channel", True, torch.float32)
        dy = torch.randn(d).expand(x.shape)
        y, grads = _run(lambda x, *p: pointwise_norm(x, candidate, *p, backend=backend), x,
                        params, dy)  # fmt: skip
        y_ref, grads_ref = _run(lambda x, *p: reference_norm(x, torch.erf, *p), x, params, dy)
        torch.testing.assert_close(y, y_ref)
        for got, want in zip(grads, grads_ref, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name", ["erf", "isru", "smoothsign", "logsignclip", "exproot",
                                  "flat_centre(tanh, 0.5)"])  # fmt: skip
def test_gradcheck_cpu_path(name: str) -> None:
    """Finite differences against the generated derivative, all five inputs, float64."""
    candidate = catalog.resolve(name)
    gen = torch.Generator().manual_seed(3)
    x = (2 * torch.randn(3, 5, generator=gen, dtype=torch.float64)).requires_grad_()
    alpha = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    s = (0.2 * torch.randn(5, generator=gen, dtype=torch.float64)).requires_grad_()
    gamma = torch.randn(5, generator=gen, dtype=torch.float64).requires_grad_()
    beta = torch.randn(5, generator=gen, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda *t: pointwise_norm(*t[:1], candidate, *t[1:], backend="torch"),
        (x, alpha, s, gamma, beta),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_nan_gradient_at_zero(backend: str, interpreter) -> None:
    """u = 0 exactly (and the clip corners): every gradient finite, dx(0) the catalog's f'(0)."""
    grid = torch.tensor([-4.0, -1.0, -0.5, -1e-30, 0.0, 1e-30, 0.5, 1.0, 4.0]).repeat(3, 1)
    zero = grid == 0
    for candidate in catalog.all():
        params = [torch.tensor(1.0), torch.tensor(0.0), torch.ones(9), torch.zeros(9)]
        x = grid.clone().requires_grad_()
        leaves = [x, *[p.requires_grad_() for p in params]]
        y = pointwise_norm(x, candidate, *params, backend=backend)
        grads = torch.autograd.grad(y.sum(), leaves)
        for g in grads:
            assert torch.isfinite(g).all(), (candidate.name, backend)
        want = (
            float(candidate.derivative.subs(candidate.expr.free_symbols.pop(), 0))
            if (candidate.expr.free_symbols)
            else 0.0
        )
        torch.testing.assert_close(grads[0][zero], torch.full_like(grads[0][zero], want),
                                   msg=candidate.name)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiny_model_trains_like_the_reference(backend: str, interpreter) -> None:
    """Same init, same data, 6 SGD steps: the loss curves of generated and reference ops agree."""
    name = "erf"

    def model(norm: torch.nn.Module) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(12, 32), norm, torch.nn.GELU(),
                                   torch.nn.Linear(32, 3))  # fmt: skip

    ours = model(PointwiseNorm(catalog.get(name), 32, shift="scalar", backend=backend))
    ref = model(ReferenceNorm(CATALOG[name], 32, shift="scalar"))
    gen = torch.Generator().manual_seed(5)
    data = torch.randn(64, 12, generator=gen)
    target = torch.randint(0, 3, (64,), generator=gen)
    curves = []
    for net in (ours, ref):
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        losses = []
        for _ in range(6):
            loss = torch.nn.functional.cross_entropy(net(data), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(losses)
    assert curves[0][-1] < curves[0][0]  # it learns
    torch.testing.assert_close(torch.tensor(curves[0]), torch.tensor(curves[1]), rtol=1e-5,
                               atol=1e-6)  # fmt: skip
    for a, b in zip(ours[1].parameters(), ref[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_gradients_are_deterministic(backend: str, interpreter) -> None:
    """Partial sums per program, finished on the host in a fixed order: bitwise repeatable."""
    candidate = catalog.get("tanh")
    x = torch.randn(37, 200)
    dy = torch.randn(37, 200)
    params = _params(200, "scalar", True, torch.float32)
    runs = [_run(lambda x, *p: pointwise_norm(x, candidate, *p, backend=backend), x, params, dy)
            for _ in range(2)]  # fmt: skip
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        assert torch.equal(a, b)
