"""Vectorised evaluation of already-validated sympy expressions, in numpy or torch.

A small tree-walking interpreter over the kernel node set (see :data:`ALLOWED_FUNCS`) instead of
``lambdify``: the mapping from sympy node to array operation is explicit and identical for numpy
and torch, Piecewise becomes ``where``, and shared sub-expressions are evaluated once (the walk
memoises on the sympy node). It only ever sees expressions built by our parser or transforms.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import sympy

from normfree.search_space._parser import U
from normfree.search_space.primitives import (
    PRIMITIVES,
    by_sympy,
    minmax,
    mp_function,
    python_function,
)

# The node types the kernel printers rely on (brief: "the ONLY sympy node types").
ALLOWED_FUNCS: tuple[type, ...] = (*(p.sympy for p in PRIMITIVES), *minmax())
_RELATIONALS = (
    sympy.StrictLessThan,
    sympy.LessThan,
    sympy.StrictGreaterThan,
    sympy.GreaterThan,
    sympy.Equality,
    sympy.Unequality,
)
_LOGIC = (sympy.And, sympy.Or, sympy.Not)


def disallowed_nodes(expr: sympy.Basic) -> list[str]:
    """Names of node types in ``expr`` outside the kernel node set (empty when all allowed)."""
    bad: set[str] = set()
    for node in sympy.preorder_traversal(expr):
        if node is U or isinstance(node, (sympy.Integer, sympy.Rational, sympy.Float)):
            continue
        if node in (sympy.pi, sympy.E, sympy.true, sympy.false):
            continue
        if isinstance(node, (sympy.Add, sympy.Mul, sympy.Pow, sympy.Piecewise)):
            if isinstance(node, sympy.Pow) and node.exp.free_symbols:
                bad.add("Pow with a variable exponent")
            continue
        if isinstance(node, sympy.functions.elementary.piecewise.ExprCondPair):
            continue
        if isinstance(node, ALLOWED_FUNCS + _RELATIONALS + _LOGIC):
            continue
        bad.add(type(node).__name__)
    return sorted(bad)


def node_count(expr: sympy.Basic) -> int:
    """Number of nodes in ``expr`` (a size measure to bound symbolic work)."""
    return sum(1 for _ in sympy.preorder_traversal(expr))


class _Backend:
    """Array operations for one library; the walker only calls these."""

    def __init__(self, lib: str) -> None:
        self.lib = lib
        if lib == "numpy":
            self.funcs: dict[type, Callable[[Any], Any]] = {
                p.sympy: python_function(p.numpy, "numpy") for p in PRIMITIVES
            }
            module: Any = np
        else:
            import torch

            self.funcs = {p.sympy: python_function(p.torch, "torch") for p in PRIMITIVES}
            module = torch
        self.where, self.logical_not = module.where, module.logical_not
        self.folds: dict[type, Callable[[Any, Any], Any]] = {
            sympy.Min: module.minimum,
            sympy.Max: module.maximum,
            sympy.And: module.logical_and,
            sympy.Or: module.logical_or,
        }


@cache
def _backend(lib: str) -> _Backend:
    """One backend per library, built on first use (torch is imported only for tensors)."""
    return _Backend(lib)


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor, without importing torch (a tensor means it is loaded)."""
    # getattr: another thread may be importing torch right now (the module is in sys.modules
    # before ``Tensor`` is defined); no tensor can exist before the class does.
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    return tensor is not None and isinstance(x, tensor)


def _full_like(x: Any, value: float) -> Any:
    if is_tensor(x):
        return sys.modules["torch"].full_like(x, value)
    return np.full_like(x, value)


def evaluate_array(expr: sympy.Basic, x: Any) -> Any:
    """Evaluate ``expr`` elementwise at ``x`` (a numpy array or a torch tensor), same dtype."""
    backend = _backend("torch" if is_tensor(x) else "numpy")
    memo: dict[sympy.Basic, Any] = {}

    def as_array(v: Any) -> Any:
        if isinstance(v, (int, float, bool)):
            return _full_like(x, float(v)) if not isinstance(v, bool) else v
        return v

    def walk(node: sympy.Basic) -> Any:
        if node in memo:
            return memo[node]
        result = _walk(node)
        memo[node] = result
        return result

    def _walk(node: sympy.Basic) -> Any:
        if node is U:
            return x
        if node is sympy.true:
            return True
        if node is sympy.false:
            return False
        if isinstance(node, sympy.Expr) and not node.free_symbols:
            # a constant sub-expression (2/pi, log(2), ...), evaluated once, guarded
            return evaluate_point(node, 0.0, dps=20, finite_only=False)
        if isinstance(node, sympy.Add):
            acc = walk(node.args[0])
            for a in node.args[1:]:
                acc = acc + walk(a)
            return acc
        if isinstance(node, sympy.Mul):
            acc = walk(node.args[0])
            for a in node.args[1:]:
                acc = acc * walk(a)
            return acc
        if isinstance(node, sympy.Pow):
            base, expo = node.args
            b = walk(base)
            if expo.free_symbols:
                raise ValueError("variable exponents are not supported")
            if expo.is_Integer:
                n = int(expo)
                if n >= 0:
                    return b**n
                return 1.0 / (b ** (-n))
            return b ** float(expo)
        if isinstance(node, sympy.Piecewise):
            # Last branch first, so earlier branches win where their condition holds.
            out = as_array(walk(node.args[-1].expr))
            for pair in reversed(node.args[:-1]):
                cond = walk(pair.cond)
                val = as_array(walk(pair.expr))
                if isinstance(cond, bool):
                    out = val if cond else out
                else:
                    out = backend.where(cond, val, out)
            return out
        fold = backend.folds.get(type(node))
        if fold is not None:  # Min, Max, And, Or: n-ary, folded pairwise
            vals = [walk(a) for a in node.args]
            if isinstance(node, (sympy.Min, sympy.Max)):
                vals = [as_array(v) for v in vals]
            acc = vals[0]
            for v in vals[1:]:
                acc = fold(acc, v)
            return acc
        if isinstance(node, _RELATIONALS):
            lhs, rhs = as_array(walk(node.lhs)), walk(node.rhs)
            if isinstance(node, sympy.StrictLessThan):
                return lhs < rhs
            if isinstance(node, sympy.LessThan):
                return lhs <= rhs
            if isinstance(node, sympy.StrictGreaterThan):
                return lhs > rhs
            if isinstance(node, sympy.GreaterThan):
                return lhs >= rhs
            if isinstance(node, sympy.Equality):
                return lhs == rhs
            return lhs != rhs
        if isinstance(node, sympy.Not):
            return backend.logical_not(walk(node.args[0]))
        fn = backend.funcs.get(type(node))
        if fn is None:
            raise ValueError(f"cannot evaluate sympy node {type(node).__name__}")
        return fn(as_array(walk(node.args[0])))

    if isinstance(x, np.ndarray):
        with np.errstate(all="ignore"):
            result = walk(expr)
    else:
        result = walk(expr)
    return as_array(result) if not isinstance(result, bool) else result


def evaluate_numpy(expr: sympy.Basic, x: np.ndarray | float) -> np.ndarray:
    """float64 numpy evaluation (the probe grid, domain and property checks)."""
    arr = np.atleast_1d(np.asarray(x, dtype=np.float64))
    return np.asarray(evaluate_array(expr, arr), dtype=np.float64)


# -- high-precision point evaluation (kink values, exact-ish properties) ------------------------


def _mp_call(node: sympy.Basic, arg: Any, mp: Any) -> Any:
    """A primitive at a high-precision point: its row's mpmath function, saturated beyond the
    row's tails (exp(exp(exp(100))) would need a number whose exponent has 1e43 digits), NaN
    where the value is not real (log of a negative number)."""
    prim = by_sympy().get(type(node))
    if prim is None:
        raise ValueError(f"cannot evaluate sympy node {type(node).__name__}")
    tails = prim.tails
    if tails is not None and abs(arg) > tails.beyond:
        return mp.mpf(tails.pos if arg > 0 else tails.neg)
    value = mp_function(prim)(arg)
    return mp.nan if isinstance(value, mp.mpc) else value


def evaluate_point(
    expr: sympy.Basic, at: Any, dps: int = 40, finite_only: bool = True
) -> float | None:
    """``expr`` at one point with ``dps`` digits (mpmath), as a float; None if not finite.

    With ``finite_only=False`` the float may be +-inf or nan instead of None.

    ``at`` is a float or an exact sympy Rational. Used where float64 is not enough: one-sided
    limits at a kink (u = c +- 1e-24) and the exact-looking values f(0), f'(0). Every function
    that could need unbounded work on hostile input is guarded (see :func:`_mp_call`).
    """
    import mpmath

    mp = mpmath.mp
    with mpmath.workdps(dps):
        x: Any = mpmath.mpf(0)  # replaced below once walk() exists
        memo: dict[sympy.Basic, Any] = {}

        def walk(node: sympy.Basic) -> Any:
            if node in memo:
                return memo[node]
            memo[node] = value = _walk(node)
            return value

        def _walk(node: sympy.Basic) -> Any:
            if node is U:
                return x
            if node is sympy.true or node is sympy.false:
                return node is sympy.true
            if isinstance(node, sympy.Rational):
                return mpmath.mpf(int(node.p)) / int(node.q)
            if isinstance(node, sympy.Float):
                return mpmath.mpf(node._mpf_)
            if node is sympy.pi:
                return +mp.pi
            if node is sympy.E:
                return +mp.e
            if isinstance(node, sympy.Add):
                return mpmath.fsum(walk(a) for a in node.args)
            if isinstance(node, sympy.Mul):
                acc = mpmath.mpf(1)
                for a in node.args:
                    acc *= walk(a)
                return acc
            if isinstance(node, sympy.Pow):
                b = walk(node.base)
                e = node.exp
                if e.free_symbols:
                    raise ValueError("variable exponent")
                if e.is_Integer:
                    n = int(e)
                    if b == 0 and n < 0:
                        return mp.inf
                    return b**n
                if b < 0:
                    return mp.nan
                if b == 0:
                    return mp.zero if e > 0 else mp.inf
                return b ** walk(e)
            if isinstance(node, sympy.Piecewise):
                for pair in node.args:
                    if walk(pair.cond):
                        return walk(pair.expr)
                return mp.nan
            if isinstance(node, sympy.Min):
                return min(walk(a) for a in node.args)
            if isinstance(node, sympy.Max):
                return max(walk(a) for a in node.args)
            if isinstance(node, _RELATIONALS):
                lhs, rhs = walk(node.lhs), walk(node.rhs)
                ops = {
                    sympy.StrictLessThan: lhs < rhs,
                    sympy.LessThan: lhs <= rhs,
                    sympy.StrictGreaterThan: lhs > rhs,
                    sympy.GreaterThan: lhs >= rhs,
                    sympy.Equality: lhs == rhs,
                    sympy.Unequality: lhs != rhs,
                }
                return ops[type(node)]
            if isinstance(node, sympy.And):
                return all(walk(a) for a in node.args)
            if isinstance(node, sympy.Or):
                return any(walk(a) for a in node.args)
            if isinstance(node, sympy.Not):
                return not walk(node.args[0])
            arg = walk(node.args[0])
            if mpmath.isnan(arg):
                return mp.nan
            return _mp_call(node, arg, mp)

        try:
            if isinstance(at, sympy.Basic):  # an exact point: 1/3, pi + 10**-24, sqrt(2)
                if at.free_symbols:
                    raise ValueError("the point must be a constant")
                x = walk(at)
                memo.clear()
            else:
                x = mpmath.mpf(at)
            value = walk(expr)
            out = float("nan") if isinstance(value, bool) else float(value)
        except (ValueError, TypeError, ZeroDivisionError, OverflowError):
            out = float("nan")
    if finite_only and not math.isfinite(out):
        return None
    return out
