"""create_norm (every kind of spec), PointwiseNorm's parameters, swap_norms, the compile backend."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

from normfree.kernels import PointwiseNorm, create_norm, pointwise_norm, swap_norms
from normfree.kernels.reference import reference_norm
from normfree.search_space import catalog, parse
from normfree.specs import NormSpec


def test_baselines() -> None:
    assert isinstance(create_norm("layernorm", 8), nn.LayerNorm)
    assert create_norm("layernorm", 8, affine=False).weight is None
    assert isinstance(create_norm("rmsnorm", 8), nn.RMSNorm)
    assert isinstance(create_norm("identity", 8), nn.Identity)
    assert isinstance(create_norm(NormSpec(name="layernorm", affine=False), 8), nn.LayerNorm)


@pytest.mark.parametrize(
    ("shift", "affine", "names"),
    [
        ("none", True, {"alpha", "gamma", "beta"}),
        ("scalar", True, {"alpha", "s", "gamma", "beta"}),
        ("channel", False, {"alpha", "s"}),
    ],
)
def test_parameters_follow_the_options(shift: str, affine: bool, names: set[str]) -> None:
    norm = create_norm("erf", 6, shift=shift, affine=affine, alpha0=0.7)
    assert isinstance(norm, PointwiseNorm) and norm.candidate.name == "erf"
    params = dict(norm.named_parameters())
    assert set(params) == names
    assert params["alpha"].shape == () and params["alpha"].item() == pytest.approx(0.7)
    if "s" in params:
        assert params["s"].shape == (() if shift == "scalar" else (6,))
        assert not params["s"].any()
    if affine:
        assert (params["gamma"] == 1).all() and not params["beta"].any()
    assert len(norm.no_decay_parameters()) == len(names)


@pytest.mark.parametrize(
    "spec",
    [
        "shift_h(erf, 0.5)",
        "u/(1+abs(u))",
        parse("u/(1+abs(u))", name="mine"),
        NormSpec(name="mine", formula="u/(1+abs(u))", shift="scalar"),
        NormSpec(name="smoothsign", shift="channel", affine=False, alpha0=1.0),
    ],
)
def test_every_kind_of_spec(spec) -> None:
    norm = create_norm(spec, 5)
    assert isinstance(norm, PointwiseNorm)
    y = norm(torch.randn(2, 3, 5))
    assert y.shape == (2, 3, 5)
    if isinstance(spec, NormSpec):
        assert norm.shift == spec.shift and norm.affine == spec.affine
        assert norm.alpha.item() == spec.alpha0


def test_keyword_options_override_a_normspec() -> None:
    norm = create_norm(NormSpec(name="erf", shift="scalar"), 4, shift="none", alpha0=2.0)
    assert norm.s is None and norm.alpha.item() == 2.0


def test_bad_inputs_are_clear_errors() -> None:
    with pytest.raises(TypeError):
        create_norm(3.0, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shift"):
        create_norm("erf", 4, shift="sideways")  # type: ignore[arg-type]
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match="backend"):
        pointwise_norm(x, catalog.get("erf"), torch.tensor(0.5), backend="cuda")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="together"):
        pointwise_norm(x, catalog.get("erf"), torch.tensor(0.5), gamma=torch.ones(4))


def test_swap_norms_replaces_every_layernorm() -> None:
    model = nn.Sequential(
        nn.Linear(4, 8), nn.LayerNorm(8), nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    ).double()
    swap_norms(model, lambda d: create_norm("tanh", d, shift="scalar"))
    norms = [m for m in model.modules() if isinstance(m, PointwiseNorm)]
    assert len(norms) == 2 and not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert all(p.dtype == torch.float64 for p in model.parameters())
    model(torch.randn(3, 4, dtype=torch.float64)).sum().backward()
    assert norms[0].alpha.grad is not None


def test_copies_and_pickles_share_the_generated_code() -> None:
    norm = create_norm("arctan", 4, shift="scalar")
    clone = copy.deepcopy(norm)
    assert clone._op is norm._op
    restored = pickle.loads(pickle.dumps(norm))
    x = torch.randn(3, 4)
    torch.testing.assert_close(restored(x), norm(x))


@pytest.mark.parametrize("shape", [(6, 40), (2, 32, 40)])  # rows: 6 (no row block), 64 (blocked)
def test_compile_backend_matches_the_reference(shape: tuple[int, ...]) -> None:
    """torch.compile of the generated torch code (the fused CPU path), fwd and all grads."""
    candidate = catalog.get("erf")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, requires_grad=True)
    params = [torch.tensor(0.7), torch.tensor(0.2), torch.randn(40, generator=gen),
              torch.randn(40, generator=gen)]  # fmt: skip
    params = [p.requires_grad_() for p in params]
    y = pointwise_norm(x, candidate, *params, backend="compile")
    grads = torch.autograd.grad(y.square().sum(), [x, *params])
    y_ref = reference_norm(x, torch.erf, *params)
    grads_ref = torch.autograd.grad(y_ref.square().sum(), [x, *params])
    torch.testing.assert_close(y, y_ref)
    for got, want in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_one_resolver_takes_the_papers_aliases() -> None:
    """Aliases and baselines resolve in create_norm as in the trainer (one map each)."""
    from normfree.kernels import create_norm

    derf = create_norm("derf", 8)
    assert derf.candidate.name == "erf" and derf.shift == "scalar"
    assert create_norm("DyT", 8).candidate.name == "tanh"
    assert create_norm("dyt", 8).shift == "none"
    assert isinstance(create_norm("ln", 8), torch.nn.LayerNorm)
    assert isinstance(create_norm("none", 8), torch.nn.Identity)
    ln = create_norm("ln", 8, affine=False)
    assert isinstance(ln, torch.nn.LayerNorm) and not ln.elementwise_affine


def test_the_kernels_read_no_settings() -> None:
    """Where generated code lives and what runs on CPU arrive as KernelOptions; only the AOT
    command line (an entry point of its own) reads the settings to build them."""
    package = Path(pointwise_norm.__code__.co_filename).parent
    readers = [p.name for p in package.glob("*.py") if "get_settings" in p.read_text()]
    assert readers == ["_aot.py"]
