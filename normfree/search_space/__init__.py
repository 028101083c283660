"""Expression language, catalog, transforms, properties and dedup (the bottom layer).

Public API::

    from normfree.search_space import U, parse, catalog, transforms, Candidate, ExpressionError
    c = parse("u/(1+abs(u))")            # validated Candidate (expr, exact derivative, ...)
    catalog.get("erf"); catalog.all(); catalog.resolve("sign_flip(shift_h(tanh, 0.1))")
    transforms.shift_h(catalog.get("erf"), 0.5)
    c.properties.model_dump(); evaluate(c, torch.linspace(-3, 3, 7)); plot_data(c)

``expr`` and ``derivative`` contain only these sympy node types (the kernel printers rely on it):
numbers (Integer, Rational, Float, pi, E), Add, Mul, Pow with a constant exponent, the sympy class
of each row of :mod:`.primitives` (Abs, sign, exp, erf, ...), Min, Max, and Piecewise with
relational (<, <=, >, >=, Eq, Ne) and logical (And, Or, Not) conditions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public names and the module that defines each. They load on first use: the CLI's quick
# commands read the catalog index (``catalog_index``) without importing sympy at all.
_LAZY = {
    "MAX_CONSTANT": "_syntax",
    "MAX_DEPTH": "_syntax",
    "MAX_EXPONENT": "_syntax",
    "MAX_LENGTH": "_syntax",
    "MAX_NODES": "_syntax",
    "U": "_parser",
    "Candidate": "candidate",
    "Lineage": "candidate",
    "TransformStep": "candidate",
    "parse": "candidate",
    "PROBE_GRID": "dedup",
    "canonical_form": "dedup",
    "find_duplicate": "dedup",
    "fingerprint": "dedup",
    "same_function": "dedup",
    "ExpressionError": "errors",
    "evaluate": "evaluation",
    "plot_data": "evaluation",
    "torch_fn": "evaluation",
    "Properties": "properties",
    "compute_properties": "properties",
}
_SUBMODULES = ("catalog", "transforms", "catalog_index", "checks", "grammar", "resolver")

if TYPE_CHECKING:
    from normfree.search_space import catalog, transforms
    from normfree.search_space._parser import U
    from normfree.search_space._syntax import (
        MAX_CONSTANT,
        MAX_DEPTH,
        MAX_EXPONENT,
        MAX_LENGTH,
        MAX_NODES,
    )
    from normfree.search_space.candidate import Candidate, Lineage, TransformStep, parse
    from normfree.search_space.dedup import (
        PROBE_GRID,
        canonical_form,
        find_duplicate,
        fingerprint,
        same_function,
    )
    from normfree.search_space.errors import ExpressionError
    from normfree.search_space.evaluation import evaluate, plot_data, torch_fn
    from normfree.search_space.properties import Properties, compute_properties


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "MAX_CONSTANT",
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_LENGTH",
    "MAX_NODES",
    "PROBE_GRID",
    "Candidate",
    "ExpressionError",
    "Lineage",
    "Properties",
    "TransformStep",
    "U",
    "canonical_form",
    "catalog",
    "compute_properties",
    "evaluate",
    "find_duplicate",
    "fingerprint",
    "parse",
    "plot_data",
    "same_function",
    "torch_fn",
    "transforms",
]
