"""The one table of primitive functions: every function a kernel can compute, once.

Each row names a primitive in the expression language and says how every backend computes it:
sympy (the symbolic node), Python's ``math`` (constant folding in the parser), numpy/scipy and
torch (numeric evaluation), mpmath (high-precision points: the guarded ones saturate instead of
needing astronomically large numbers), and the code the three printers emit (torch, Triton, C).
The parser's function table, the allowed node set, the numeric backends, the grammar's names and
the printers' function maps are all derived from it, so a new primitive is one row here plus
its helpers in the printers when a backend has no native function (see docs/architecture.md).

``Min``/``Max`` (n-ary, printed by nesting), ``Pow`` (by exponent) and ``Piecewise`` (by
``where``) are structural and stay special cases of each printer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Primitive:
    """One function of one argument and how each backend computes it."""

    name: str  # in formulas and in the grammar's text
    sympy_name: str  # the name of the node's sympy class (``Abs``): see :attr:`sympy`
    math: Callable[[float], float]  # a float, for the parser's constant folding
    numpy: str  # "module.attr": numpy's (or scipy.special's) vectorised function
    torch: str  # attribute path under ``torch`` for numeric evaluation of tensors
    torch_code: str  # what the torch printer emits
    triton: str  # what the Triton printer emits (helpers in kernels._printers)
    c: str  # what the C printer emits (helpers in kernels._printers.c_helpers)
    # mpmath: "guarded" for the functions ``_numeric._mp_guarded`` saturates, else the mpmath
    # function's name (log and sign keep their own edge rules there).
    mpmath: str

    @property
    def sympy(self) -> type:
        """The sympy class of the node. Resolved on use, not when the table loads: the parser's
        syntax pass reads names and floats from this table, and must not import sympy."""
        import sympy

        return getattr(sympy, self.sympy_name)


def _sign(v: float) -> float:
    return float((v > 0) - (v < 0))


# One row per primitive. ``sympy``: the class's name in sympy; ``math``: the function's name in
# Python's math module (``abs`` and ``sign``: the builtin and :func:`_sign`); the other columns
# as in :class:`Primitive`.
_TABLE = """
name   sympy  math   numpy              torch         torch_code   triton       c         mpmath
erf    erf    erf    scipy.special.erf  special.erf   torch.erf    tl.math.erf  nf_erf    guarded
erfc   erfc   erfc   scipy.special.erfc special.erfc  torch.erfc   _erfc        nf_erfc   guarded
tanh   tanh   tanh   numpy.tanh         tanh          torch.tanh   _tanh        nf_tanh   guarded
atan   atan   atan   numpy.arctan       atan          torch.atan   _atan        nf_atan   atan
asinh  asinh  asinh  numpy.arcsinh      asinh         torch.asinh  _asinh       nf_asinh  asinh
sinh   sinh   sinh   numpy.sinh         sinh          torch.sinh   _sinh        nf_sinh   guarded
cosh   cosh   cosh   numpy.cosh         cosh          torch.cosh   _cosh        nf_cosh   guarded
sin    sin    sin    numpy.sin          sin           torch.sin    tl.sin       sinf      guarded
cos    cos    cos    numpy.cos          cos           torch.cos    tl.cos       cosf      guarded
exp    exp    exp    numpy.exp          exp           torch.exp    tl.exp       nf_exp    guarded
log    log    log    numpy.log          log           torch.log    tl.log       logf      log
abs    Abs    abs    numpy.abs          abs           torch.abs    tl.abs       fabsf     abs
sign   sign   sign   numpy.sign         sign          torch.sign   _sign        nf_sign   sign
"""
_MATH_SPECIAL: dict[str, Callable[[float], float]] = {"abs": abs, "sign": _sign}


def _rows(table: str) -> tuple[Primitive, ...]:
    lines = [line.split() for line in table.strip().splitlines()]
    header, rows = lines[0], lines[1:]
    out = []
    for row in rows:
        cell: dict[str, Any] = dict(zip(header, row, strict=True))
        cell["sympy_name"] = cell.pop("sympy")
        cell["math"] = _MATH_SPECIAL.get(cell["math"]) or getattr(math, cell["math"])
        out.append(Primitive(**cell))
    return tuple(out)


PRIMITIVES: tuple[Primitive, ...] = _rows(_TABLE)
BY_NAME: dict[str, Primitive] = {p.name: p for p in PRIMITIVES}
assert len(BY_NAME) == len({p.sympy_name for p in PRIMITIVES}) == len(PRIMITIVES), "one per row"


@cache
def by_sympy() -> dict[type, Primitive]:
    """``{sympy class: primitive}`` (a function: building it imports sympy)."""
    return {p.sympy: p for p in PRIMITIVES}


def minmax() -> tuple[type, ...]:
    """The n-ary heads every backend prints by nesting two-argument min/max."""
    import sympy

    return (sympy.Min, sympy.Max)


def printer_functions(column: str) -> dict[type, str]:
    """``{sympy class: code}`` of one printer's column (``torch_code``, ``triton``, ``c``)."""
    return {p.sympy: getattr(p, column) for p in PRIMITIVES}


def resolve_numeric(path: str) -> Callable[..., object]:
    """The function a ``numpy`` column names (``"scipy.special.erf"``), imported on first use:
    scipy costs a quick CLI command 0.3-0.5 s and most formulas have no erf."""
    module, _, attr = path.rpartition(".")
    if module == "numpy":
        import numpy

        return getattr(numpy, attr)

    def call(x: object) -> object:
        import importlib

        return getattr(importlib.import_module(module), attr)(x)

    call.__name__ = attr
    return call


def resolve_torch(path: str) -> Callable[..., object]:
    """The torch function a ``torch`` column names (``"special.erf"``)."""
    import torch

    obj: object = torch
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]
