"""Generated operators for pointwise norms: printers, kernel cache, autograd ops, create_norm.

One expression and its exact derivative (from ``search_space``) are printed three ways: Triton
kernels (GPU, and CPU under ``TRITON_INTERPRET=1``), C (the native CPU path) and torch code
(eager, or fused by ``torch.compile``); :mod:`.reference` is the operator written plainly with
autograd, what the tests and benchmarks compare against. Where the generated code lives and what
CPU tensors run is the caller's :class:`KernelOptions`.
"""

from normfree.kernels._factory import create_norm, swap_norms
from normfree.kernels._module import PointwiseNorm
from normfree.kernels._ops import (
    BACKENDS,
    CompiledOperator,
    PointwiseNormFunction,
    compile_candidate,
    pointwise_norm,
)
from normfree.kernels._options import KernelOptions, default_options, set_default_options

__all__ = [
    "BACKENDS",
    "CompiledOperator",
    "KernelOptions",
    "PointwiseNorm",
    "PointwiseNormFunction",
    "compile_candidate",
    "create_norm",
    "default_options",
    "pointwise_norm",
    "set_default_options",
    "swap_norms",
]
