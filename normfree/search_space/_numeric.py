"""Vectorised evaluation of already-validated sympy expressions, in numpy or torch.

A small tree-walking interpreter over the kernel node set (see :data:`ALLOWED_FUNCS`) instead of
``lambdify``: the mapping from sympy node to array operation is explicit and identical for numpy
and torch, Piecewise becomes ``where``, and shared sub-expressions are evaluated once (the walk
memoises on the sympy node). It only ever sees expressions built by our parser or transforms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.special
import sympy
import torch

from normfree.search_space._parser import U

# The node types the kernel printers rely on (brief: "the ONLY sympy node types").
ALLOWED_FUNCS: tuple[type, ...] = (
    sympy.Abs,
    sympy.sign,
    sympy.exp,
    sympy.log,
    sympy.erf,
    sympy.erfc,
    sympy.tanh,
    sympy.atan,
    sympy.asinh,
    sympy.sinh,
    sympy.cosh,
    sympy.sin,
    sympy.cos,
    sympy.Min,
    sympy.Max,
)
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
                sympy.Abs: np.abs,
                sympy.sign: np.sign,
                sympy.exp: np.exp,
                sympy.log: np.log,
                sympy.erf: scipy.special.erf,
                sympy.erfc: scipy.special.erfc,
                sympy.tanh: np.tanh,
                sympy.atan: np.arctan,
                sympy.asinh: np.arcsinh,
                sympy.sinh: np.sinh,
                sympy.cosh: np.cosh,
                sympy.sin: np.sin,
                sympy.cos: np.cos,
            }
            self.where = np.where
            self.minimum, self.maximum = np.minimum, np.maximum
            self.logical_and, self.logical_or = np.logical_and, np.logical_or
            self.logical_not = np.logical_not
        else:
            self.funcs = {
                sympy.Abs: torch.abs,
                sympy.sign: torch.sign,
                sympy.exp: torch.exp,
                sympy.log: torch.log,
                sympy.erf: torch.special.erf,
                sympy.erfc: torch.special.erfc,
                sympy.tanh: torch.tanh,
                sympy.atan: torch.atan,
                sympy.asinh: torch.asinh,
                sympy.sinh: torch.sinh,
                sympy.cosh: torch.cosh,
                sympy.sin: torch.sin,
                sympy.cos: torch.cos,
            }
            self.where = torch.where
            self.minimum, self.maximum = torch.minimum, torch.maximum
            self.logical_and, self.logical_or = torch.logical_and, torch.logical_or
            self.logical_not = torch.logical_not


_BACKENDS = {"numpy": _Backend("numpy"), "torch": _Backend("torch")}


def _full_like(x: Any, value: float) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.full_like(x, value)
    return np.full_like(x, value)


def evaluate_array(expr: sympy.Basic, x: Any) -> Any:
    """Evaluate ``expr`` elementwise at ``x`` (a numpy array or a torch tensor), same dtype."""
    backend = _BACKENDS["torch" if isinstance(x, torch.Tensor) else "numpy"]
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
            return float(node)  # constant sub-expression (2/pi, log(2), ...): once, exactly
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
        if isinstance(node, (sympy.Min, sympy.Max)):
            op = backend.minimum if isinstance(node, sympy.Min) else backend.maximum
            vals = [as_array(walk(a)) for a in node.args]
            acc = vals[0]
            for v in vals[1:]:
                acc = op(acc, v)
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
        if isinstance(node, sympy.And):
            vals = [walk(a) for a in node.args]
            acc = vals[0]
            for v in vals[1:]:
                acc = backend.logical_and(acc, v)
            return acc
        if isinstance(node, sympy.Or):
            vals = [walk(a) for a in node.args]
            acc = vals[0]
            for v in vals[1:]:
                acc = backend.logical_or(acc, v)
            return acc
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
