"""The native CPU path: generated C, its own exp/erf, the build cache, threads and fallbacks.

The operator contract (every catalog entry against the float64 reference, odd shapes, half
precision, u = 0) runs for ``backend="native"`` in test_operator.py; this file covers what is
specific to the C path.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from normfree.kernels import KernelOptions, _native, _ops, compile_candidate, pointwise_norm
from normfree.search_space import catalog, parse
from normfree.search_space._fits import ERF_CLAMP, ERF_P, ERF_Q, erf_rational_fit
from normfree.settings import Settings

ONE = torch.tensor(1.0)


def _f(formula_or_name: str, u: torch.Tensor) -> torch.Tensor:
    """f(u) through the native forward (alpha = 1, no shift, no affine)."""
    try:
        candidate = catalog.resolve(formula_or_name)
    except Exception:
        candidate = parse(formula_or_name)
    return pointwise_norm(u, candidate, ONE, backend="native")


def test_erf_is_within_4e7_of_float64_everywhere() -> None:
    u = torch.linspace(-6.0, 6.0, 240_001)
    got = _f("erf", u).double()
    want = torch.erf(u.double())
    assert (got - want).abs().max().item() < 4e-7
    edge = torch.tensor([0.0, -0.0, 1e-30, 3.925, 4.0, 50.0, -50.0, math.inf, -math.inf])
    torch.testing.assert_close(_f("erf", edge), torch.erf(edge), rtol=0, atol=4e-7)
    assert torch.isnan(_f("erf", torch.tensor([math.nan]))).all()
    assert _f("erf", torch.tensor([1e-30])).item() > 0  # odd and exact near 0: no cancellation


def test_exp_is_within_2_ulp_and_saturates_like_torch() -> None:
    u = torch.linspace(-86.0, 88.0, 200_001)
    got = _f("exp(u)", u).double()
    want = torch.exp(u.double())
    assert ((got - want).abs() / want).max().item() < 2.5e-7
    edge = torch.tensor([-1000.0, -90.0, 89.0, 1000.0, -math.inf, math.inf])
    torch.testing.assert_close(_f("exp(u)", edge), torch.exp(edge), rtol=2.5e-7, atol=2e-38)
    assert torch.isnan(_f("exp(u)", torch.tensor([math.nan]))).all()


def test_erf_coefficients_are_what_the_fit_produces() -> None:
    """The shipped literals are as good as a refit: the least-squares problem is ill-conditioned,
    so LAPACK builds move the coefficients in their 5th-6th digit, never the fit's quality."""
    p, q, worst = erf_rational_fit()
    assert worst < 2e-9  # float64 error of the rational function itself

    def max_error(pc: tuple[float, ...], qc: tuple[float, ...]) -> float:
        x = np.linspace(0.0, ERF_CLAMP, 20_001)
        approx = x * np.polyval(pc[::-1], x * x) / np.polyval(qc[::-1], x * x)
        return float(np.abs(approx - np.array([math.erf(v) for v in x])).max())

    shipped = max_error(ERF_P, ERF_Q)
    assert shipped < 2e-9 and shipped <= 1.05 * max_error(p, q)
    assert p == pytest.approx(ERF_P, rel=1e-3) and q == pytest.approx(ERF_Q, rel=1e-3)


def test_two_threads_match_one_thread() -> None:
    x = torch.randn(1024, 384, generator=torch.Generator().manual_seed(0))
    dy = torch.randn_like(x)

    def step(threads: int):
        torch.set_num_threads(threads)
        leaves = [
            x.clone().requires_grad_(),
            torch.tensor(0.7, requires_grad=True),
            torch.full((384,), 0.1, requires_grad=True),
            torch.ones(384, requires_grad=True),
            torch.zeros(384, requires_grad=True),
        ]
        y = pointwise_norm(leaves[0], catalog.get("erf"), *leaves[1:], backend="native")
        return (y, *torch.autograd.grad(y, leaves, dy))

    assert len(_native._blocks(1024, 384)) == 1  # the autouse fixture's one thread
    one = step(1)
    two = step(2)
    assert len(_native._blocks(1024, 384)) == 2
    for a, b in zip(one, two, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])  # elementwise: exact
    assert all(torch.equal(a, b) for a, b in zip(two, step(2), strict=True))  # deterministic


def test_library_is_built_once_and_reloaded_from_the_cache(kernel_cache: Path) -> None:
    # a formula no other test builds: operators are memoised per process, so a shared one may
    # have been built into another cache directory by an earlier test outside tests/kernels
    op = compile_candidate(parse("tanh(u) / (1 + abs(u))"))
    lib = op.native_kernels
    assert lib.path.parent == kernel_cache and lib.path.suffix == ".so"
    assert lib.path.with_suffix(".c").read_text().count("nf_tanh") > 1  # inspectable source
    mtime = lib.path.stat().st_mtime_ns
    _native._libraries.clear()  # as a new process would: nothing loaded, the file exists
    again = _native.build(op.name, lib.path.with_suffix(".c").read_text(), op.options)
    assert again.path == lib.path and again is not lib
    assert lib.path.stat().st_mtime_ns == mtime  # loaded, not recompiled


def test_a_new_process_loads_without_compiling(kernel_cache: Path) -> None:
    formula = "u / sqrt(u**2 + 3)"  # unique to this test (see above)
    compile_candidate(parse(formula)).native_kernels  # noqa: B018 - build it here
    code = (
        "import torch, normfree.kernels._native as n\n"
        "from pathlib import Path\n"
        "from normfree.kernels import KernelOptions, pointwise_norm\n"
        "from normfree.search_space import parse\n"
        f"options = KernelOptions(cache=Path({str(kernel_cache)!r}))\n"
        "def boom(*a): raise SystemExit('compiled again')\n"
        "n._compile = boom\n"
        f"y = pointwise_norm(torch.ones(3, 4), parse({formula!r}), torch.tensor(1.0),"
        " backend='native', kernels=options)\n"
        "print(round(float(y[0, 0]), 6))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(round(1 / math.sqrt(4), 6))


def test_missing_compiler_falls_back_to_eager_with_one_warning(kernel_cache) -> None:
    options = KernelOptions(cache=kernel_cache, cc="no-such-cc-normfree")
    candidate = parse("u / (1 + u**2)")
    x = torch.randn(8, 16)
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        y = pointwise_norm(x, candidate, ONE, backend="native", kernels=options)
    torch.testing.assert_close(y, x / (1 + x**2))
    assert "no-such-cc-normfree" in _ops._missing_compilers  # every user of it runs eager
    other = parse("u / (3 + u**2)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # silently, without trying to build again
        z = pointwise_norm(x, other, ONE, backend="native", kernels=options)
    torch.testing.assert_close(z, x / (3 + x**2))
    del _ops._missing_compilers["no-such-cc-normfree"]


def test_compiler_error_falls_back_for_that_candidate_only(monkeypatch, kernel_cache) -> None:
    def broken(cc: str, source: str, src_path: Path, out: Path) -> None:
        out.write_bytes(b"half a library")  # what a failed build may leave behind
        raise _native.NativeBuildError("cc: error: simulated")

    monkeypatch.setattr(_native, "_compile", broken)
    candidate = parse("u / (2 + abs(u))")
    x = torch.randn(5, 7)
    libraries = set(kernel_cache.glob("*.so"))
    with pytest.warns(RuntimeWarning, match="simulated"):
        y = pointwise_norm(x, candidate, ONE, backend="native")
    torch.testing.assert_close(y, x / (2 + x.abs()))
    assert not _ops._missing_compilers  # other candidates keep the native path
    assert not list(kernel_cache.glob("*.tmp"))  # the failed build's output was removed
    assert set(kernel_cache.glob("*.so")) == libraries  # and no library appeared


def test_fp64_takes_the_eager_path_and_passes_gradcheck() -> None:
    candidate = catalog.get("erf")
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    params = (
        torch.tensor(0.6, dtype=torch.float64, requires_grad=True),
        torch.randn(5, dtype=torch.float64, requires_grad=True),
        torch.randn(5, dtype=torch.float64, requires_grad=True),
        torch.randn(5, dtype=torch.float64, requires_grad=True),
    )
    assert torch.autograd.gradcheck(
        lambda *t: pointwise_norm(t[0], candidate, *t[1:], backend="native"), (x, *params)
    )


def test_auto_runs_the_options_cpu_backend_native_by_default() -> None:
    assert KernelOptions().cpu_backend == "native" == Settings().kernel_cpu_backend
    assert _ops.resolve_backend("auto", torch.ones(1), KernelOptions()) == "native"
    torch_only = KernelOptions(cpu_backend="torch")
    assert _ops.resolve_backend("auto", torch.ones(1), torch_only) == "torch"


@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (2, 0, 5)])
def test_empty_inputs_give_empty_outputs_and_zero_grads(shape) -> None:
    x = torch.randn(shape, requires_grad=True)
    alpha = torch.tensor(0.5, requires_grad=True)
    gamma = torch.ones(shape[-1], requires_grad=True)
    beta = torch.zeros(shape[-1], requires_grad=True)
    y = pointwise_norm(x, catalog.get("erf"), alpha, None, gamma, beta, backend="native")
    y.sum().backward()
    assert y.shape == x.shape and alpha.grad == 0 and x.grad.shape == x.shape
