"""Expression language, catalog, transforms, properties and dedup (the bottom layer).

Public API::

    from normfree.search_space import U, parse, catalog, transforms, Candidate, ExpressionError
    c = parse("u/(1+abs(u))")            # validated Candidate (expr, exact derivative, ...)
    catalog.get("erf"); catalog.all(); catalog.resolve("sign_flip(shift_h(tanh, 0.1))")
    transforms.shift_h(catalog.get("erf"), 0.5)
    c.properties.model_dump(); evaluate(c, torch.linspace(-3, 3, 7)); plot_data(c)

``expr`` and ``derivative`` contain only these sympy node types (the kernel printers rely on it):
numbers (Integer, Rational, Float, pi, E), Add, Mul, Pow with a constant exponent, Abs, sign, exp,
log, erf, erfc, tanh, atan, asinh, sinh, cosh, sin, cos, Min, Max, and Piecewise with relational
(<, <=, >, >=, Eq, Ne) and logical (And, Or, Not) conditions.
"""

from normfree.search_space import catalog, transforms
from normfree.search_space._parser import (
    MAX_CONSTANT,
    MAX_DEPTH,
    MAX_EXPONENT,
    MAX_LENGTH,
    MAX_NODES,
    U,
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
