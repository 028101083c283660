"""The printers: node-set rules, cse, and every primitive's accuracy in every kernel backend.

Primitives are checked through the real generated kernels (Triton interpreter, native C, torch;
fp32), y = f(x) with alpha = 1 and no shift/affine, against float64 math on the same fp32
inputs, to the accuracy each row of the primitives table states.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import sympy
import torch

from normfree.kernels import compile_candidate, pointwise_norm
from normfree.kernels._printers import PrinterError, TorchPrinter, TritonPrinter, cse_lines
from normfree.search_space import U
from normfree.search_space._derivative import kernel_safe_derivative
from normfree.search_space._fits import atan_coefficients
from normfree.search_space.primitives import PRIMITIVES, python_function

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@dataclasses.dataclass(frozen=True)
class Expr:
    name: str
    expr: sympy.Expr
    derivative: sympy.Expr


def _kernel_f(expr: sympy.Expr, x: np.ndarray, backend: str = "triton") -> np.ndarray:
    cand = Expr("helper", expr, kernel_safe_derivative(expr))
    xt = torch.from_numpy(x.astype(np.float32)).reshape(1, -1)
    y = pointwise_norm(xt, cand, torch.tensor(1.0), backend=backend)
    return y.reshape(-1).double().numpy()


def _grid(lo: float, hi: float, n: int = 4001) -> np.ndarray:
    """A dense grid of [lo, hi] and log-spaced magnitudes from 1e-30, rounded to fp32."""
    dense = np.linspace(lo, hi, n)
    logs = np.logspace(-30, np.log10(max(abs(lo), abs(hi))), 400)
    pts = np.concatenate([dense, logs, -logs, [0.0]])
    return pts[(pts >= lo) & (pts <= hi)].astype(np.float32).astype(np.float64)


def test_atan_polynomial_fit() -> None:
    coefs = atan_coefficients()
    assert coefs == atan_coefficients()  # deterministic
    t = np.linspace(0, 1, 100001)
    approx = sum(c * t ** (2 * k + 1) for k, c in enumerate(coefs))
    assert np.abs(approx - np.arctan(t)).max() < 1e-9  # the fit in float64


@pytest.mark.parametrize("backend", ["triton", "native", "torch"])
@pytest.mark.parametrize("prim", PRIMITIVES, ids=lambda p: p.name)
def test_every_primitive_meets_its_rows_accuracy(prim, backend, interpreter) -> None:
    """f(x) = prim(x) through each fp32 kernel against the row's float64 numpy column, on the
    row's range (``Primitive.accuracy``): the helpers' approximations and the libraries'."""
    acc = prim.accuracy
    x = _grid(acc.lo, acc.hi)
    if prim.domain == "positive":
        x = x[x > 0]
    got = _kernel_f(prim.sympy(U), x, backend)
    want = python_function(prim.numpy, "numpy")(x)
    err = np.abs(got - want)
    bound = acc.atol + acc.rtol * np.abs(want)
    worst = int(np.argmax(err - bound))
    assert np.all(err <= bound), (prim.name, backend, x[worst], got[worst], want[worst])


def test_general_power_keeps_its_accuracy(interpreter) -> None:
    """exp(p*log x): relative error grows like |p log x| * eps, 3e-6 at x = 1e-30."""
    x = _grid(-1e4, 1e4)
    for backend in ("triton", "native"):
        got = _kernel_f(sympy.Abs(U) ** sympy.Rational(7, 10), x, backend)
        want = np.abs(x) ** 0.7
        assert np.all(np.abs(got - want) <= 5e-6 * want), backend


def test_general_power_at_zero(interpreter) -> None:
    x = np.array([0.0, 1.0])
    assert _kernel_f(sympy.Abs(U) ** sympy.Rational(7, 10), x)[0] == 0.0
    assert _kernel_f(sympy.Abs(U) ** sympy.Rational(-3, 10), x)[0] == math.inf


def test_integer_and_half_powers_need_no_pow_call() -> None:
    for printer in (TorchPrinter(U), TritonPrinter(U)):
        five = printer.print(U**5)
        assert "pow" not in five and "**" not in five and five.count("u") == 5
        assert printer.print(U**-3).startswith("1.0 / (")
        assert "sqrt" in printer.print((U**2 + 1) ** sympy.Rational(3, 2))
    assert "tl.exp(0.7 * tl.log(" in TritonPrinter(U).print(sympy.Abs(U) ** sympy.Rational(7, 10))


def test_piecewise_becomes_nested_where() -> None:
    pw = sympy.Piecewise((0, U < -1), (U, U <= 1), (1, True))
    assert TritonPrinter(U).print(pw).count("tl.where(") == 2
    assert TorchPrinter(U).print(pw).count("torch.where(") == 2


def test_cse_shares_work_between_f_and_its_derivative() -> None:
    lines, out = cse_lines(TritonPrinter(U), {"f": sympy.tanh(U), "df": 1 - sympy.tanh(U) ** 2})
    assert lines == ["    t0 = _tanh(u)"]
    assert out == {"f": "t0", "df": "1.0 - t0 * t0"}


@pytest.mark.parametrize("bad", [sympy.gamma(U), sympy.Symbol("v") * U, U**U])
def test_unknown_nodes_are_refused(bad: sympy.Expr) -> None:
    with pytest.raises((PrinterError, ValueError)):
        _ = compile_candidate(Expr("bad", bad, sympy.Integer(1))).torch_module


def test_generated_source_is_readable(kernel_cache) -> None:
    from normfree.search_space import catalog

    op = compile_candidate(catalog.get("saturlog"))
    source = open(op.triton_module.__file__).read()  # noqa: SIM115 - read whole file
    assert "canonical:" in source and "def _f_df(u):" in source and "def _fwd_kernel(" in source
    assert "\n    t0 = " in source  # named temporaries from cse
    compile(source, "generated", "exec")  # valid Python
