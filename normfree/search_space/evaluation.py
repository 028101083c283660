"""Numerical evaluation of candidates in torch (and numpy), and plot data of f and f'."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from normfree.search_space._numeric import evaluate_array, is_tensor
from normfree.search_space.candidate import Candidate

if TYPE_CHECKING:  # torch is imported by whoever hands us a tensor, not by the search space
    import torch


def evaluate(candidate: Candidate, x: Any, derivative: bool = False) -> Any:
    """f(x) (or f'(x)) elementwise; a torch tensor or numpy array keeps its type and dtype.

    Python scalars and lists are evaluated in float64 numpy. This is the reference evaluator
    (clear, not fast); the kernels layer generates fused code from the same expression.
    """
    expr = candidate.derivative if derivative else candidate.expr
    if is_tensor(x):
        if not x.is_floating_point():
            import torch

            x = x.to(torch.get_default_dtype())
        return evaluate_array(expr, x)
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    out = evaluate_array(expr, np.atleast_1d(arr))
    return out.reshape(arr.shape) if arr.ndim == 0 else out


def torch_fn(candidate: Candidate, derivative: bool = False) -> Callable[[torch.Tensor], Any]:
    """``tensor -> tensor`` computing f (or f') of ``candidate`` in the tensor's dtype."""
    expr = candidate.derivative if derivative else candidate.expr

    def fn(x: torch.Tensor) -> torch.Tensor:
        return evaluate_array(expr, x)

    fn.__name__ = f"{candidate.name}{'_prime' if derivative else ''}"
    return fn


def plot_data(
    candidate: Candidate, lo: float = -5.0, hi: float = 5.0, n: int = 401
) -> dict[str, list[float]]:
    """Points of f and f' on ``n`` evenly spaced u in [lo, hi], as JSON-ready lists."""
    if not (lo < hi) or not (2 <= n <= 100_000):
        raise ValueError("plot_data needs lo < hi and 2 <= n <= 100000")
    u = np.linspace(lo, hi, n)
    f = evaluate_array(candidate.expr, u)
    d = evaluate_array(candidate.derivative, u)
    return {
        "u": u.tolist(),
        "f": np.asarray(f, float).tolist(),
        "df": np.asarray(d, float).tolist(),
    }
