"""Generated operators for pointwise norms: printers, kernel cache, autograd ops, create_norm.

One expression and its exact derivative (from ``search_space``) are printed three ways: Triton
kernels (GPU, and CPU under ``TRITON_INTERPRET=1``), torch code (the CPU path, eager or fused by
``torch.compile``), and — in the tests — an independent float64 reference.
"""

from normfree.kernels._cache import cache_dir, set_cache_dir
from normfree.kernels._factory import create_norm, swap_norms
from normfree.kernels._module import PointwiseNorm
from normfree.kernels._ops import (
    BACKENDS,
    CompiledOperator,
    PointwiseNormFunction,
    compile_candidate,
    pointwise_norm,
)

__all__ = [
    "BACKENDS",
    "CompiledOperator",
    "PointwiseNorm",
    "PointwiseNormFunction",
    "cache_dir",
    "compile_candidate",
    "create_norm",
    "pointwise_norm",
    "set_cache_dir",
    "swap_norms",
]
