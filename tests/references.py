"""The catalog entries' reference formulas (``Entry.reference``), evaluated by numpy, torch or
mpmath (at one high-precision point).

Each reference is the function as science.md writes it, typed beside its entry independently of
the entry's formula; here it is run as Python over the library's own functions, so the check
never passes through the parser, sympy, the derivative or a printer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from normfree.search_space import catalog

Lib = Literal["numpy", "torch", "mpmath"]


def _scope(lib: Lib) -> dict[str, Any]:
    if lib == "mpmath":
        import mpmath

        def clamp(v: Any, lo: Any, hi: Any) -> Any:
            return min(max(v, lo), hi)

        fns = dict(abs=abs, sign=mpmath.sign, sqrt=mpmath.sqrt, exp=mpmath.exp, log=mpmath.log,
                   sin=mpmath.sin, cos=mpmath.cos, sinh=mpmath.sinh, cosh=mpmath.cosh,
                   tanh=mpmath.tanh, erf=mpmath.erf, arctan=mpmath.atan, asinh=mpmath.asinh,
                   clamp=clamp)  # fmt: skip
        # pi as mpmath's constant at the working precision (float pi is off by 1e-16)
        return {**fns, "pi": mpmath.mp.pi, "clip": lambda v: clamp(v, -1, 1), "__builtins__": {}}
    if lib == "numpy":
        import numpy as np
        import scipy.special

        fns = dict(abs=np.abs, sign=np.sign, sqrt=np.sqrt, exp=np.exp, log=np.log, sin=np.sin,
                   cos=np.cos, sinh=np.sinh, cosh=np.cosh, tanh=np.tanh, erf=scipy.special.erf,
                   arctan=np.arctan, asinh=np.arcsinh, clamp=np.clip)  # fmt: skip
    else:
        import torch

        fns = dict(abs=torch.abs, sign=torch.sign, sqrt=torch.sqrt, exp=torch.exp, log=torch.log,
                   sin=torch.sin, cos=torch.cos, sinh=torch.sinh, cosh=torch.cosh,
                   tanh=torch.tanh, erf=torch.erf, arctan=torch.atan, asinh=torch.asinh,
                   clamp=torch.clamp)  # fmt: skip
    clamp = fns["clamp"]
    return {**fns, "pi": math.pi, "clip": lambda v: clamp(v, -1.0, 1.0), "__builtins__": {}}


def reference(name: str, lib: Lib) -> Callable[[Any], Any]:
    """The entry ``name``'s reference formula as a function of ``u`` (an array, a tensor or an
    mpmath number)."""
    text = {e.name: e for e in catalog.ENTRIES}[name].reference
    assert text, f"catalog entry {name!r} has no reference formula"
    code = compile(text, f"<reference of {name}>", "eval")
    scope = _scope(lib)
    return lambda u: eval(code, scope, {"u": u})  # trusted text: the catalog's own
