"""Compiled operator per candidate, the autograd Function and the functional form.

Layering (Liger style): generated ``_fwd_kernel``/``_bwd_kernel`` (Triton) or generated torch
``f``/``f_and_df`` -> launchers (:mod:`._triton_ops`, :mod:`._torch_ops`) ->
:class:`PointwiseNormFunction` -> :class:`normfree.kernels.PointwiseNorm` -> :func:`pointwise_norm`.

Backends: ``"triton"`` (generated Triton; CUDA tensors, or CPU tensors under
``TRITON_INTERPRET=1``), ``"native"`` (generated C, CPU: :mod:`._native`), ``"torch"``
(generated torch code, eager), ``"compile"`` (the same torch code fused by ``torch.compile``)
and ``"auto"``: Triton on CUDA, and on CPU the operator's ``KernelOptions.cpu_backend`` (see
:class:`._options.KernelOptions` for the measurement behind its default).

``import normfree.kernels`` does not import triton: Triton decides at *its* import whether
``@triton.jit`` makes interpreter objects (``TRITON_INTERPRET``), so importing it early from a
CPU-only code path would make the interpreter unusable later in the same process.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, Protocol

import sympy
import torch
from torch import Tensor

from normfree.kernels import _native, _torch_ops
from normfree.kernels._cache import cache_key, load_generated
from normfree.kernels._codegen import c_source, torch_source, triton_source
from normfree.kernels._options import KernelOptions, default_options
from normfree.kernels._torch_ops import NormParams

Backend = Literal["auto", "triton", "native", "torch", "compile"]
BACKENDS = ("auto", "triton", "native", "torch", "compile")


class CandidateLike(Protocol):
    """What the kernels need from a ``search_space.Candidate``."""

    name: str
    expr: sympy.Expr
    derivative: sympy.Expr


def _variable(expr: sympy.Expr, derivative: sympy.Expr) -> sympy.Symbol:
    free = expr.free_symbols | derivative.free_symbols
    others = sorted(str(sym) for sym in free if sym.name != "u")
    if others:
        raise ValueError(f"expression has free symbols other than u: {others}")
    return next(iter(free)) if free else sympy.Symbol("u", real=True)


@dataclass(eq=False)
class CompiledOperator:
    """The generated code of one candidate; modules load lazily from ``options.cache``."""

    name: str
    expr: sympy.Expr
    derivative: sympy.Expr
    canonical: str
    options: KernelOptions = field(default_factory=KernelOptions)
    _compiled: dict[str, Any] = field(default_factory=dict, repr=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledOperator:
        return self  # immutable code; copies of a model (EMA, checkpoints) share it

    def __reduce__(self) -> tuple[Any, ...]:
        # pickles as its expressions (sympy pickles); the generated modules reload from the cache
        args = (self.name, self.expr, self.derivative, self.canonical, self.options)
        return (_rebuild, args)

    @property
    def variable(self) -> sympy.Symbol:
        return _variable(self.expr, self.derivative)

    def _key(self, kind: str) -> str:
        return cache_key(kind, sympy.srepr(self.expr), sympy.srepr(self.derivative))

    def _generated(self, kind: str, source: Callable[..., str]) -> ModuleType:
        """The generated ``kind`` module: loaded from the cache, or written there by ``source``
        (one of ``_codegen``'s printers) when this expression's key is missing."""
        return load_generated(
            self.options.cache, kind, self.name, self._key(kind),
            lambda: source(self.expr, self.derivative, self.variable, self.canonical),
        )  # fmt: skip

    @functools.cached_property
    def torch_module(self) -> ModuleType:
        return self._generated("torch", torch_source)

    @functools.cached_property
    def triton_module(self) -> ModuleType:
        return self._generated("triton", triton_source)

    @functools.cached_property
    def native_kernels(self) -> _native.NativeKernels:
        """The C kernels (built once per machine into the kernel cache, then loaded)."""
        source = c_source(self.expr, self.derivative, self.variable, self.canonical)
        return _native.build(self.name, source, self.options)

    def compiled(self, which: Literal["forward", "backward"]) -> Any:
        """torch.compile'd forward / backward (built once each, dynamic shapes)."""
        if which not in self._compiled:
            mod = self.torch_module
            if which == "forward":
                fn = functools.partial(_torch_ops.forward_math, mod.f)
            else:
                fn = functools.partial(_torch_ops.backward_fused, mod.f_and_df)
            self._compiled[which] = torch.compile(fn, dynamic=True, fullgraph=True)
        return self._compiled[which]


@dataclass(frozen=True)
class _Parts:
    name: str
    expr: sympy.Expr
    derivative: sympy.Expr
    canonical: str


def _rebuild(
    name: str, expr: sympy.Expr, derivative: sympy.Expr, canonical: str, options: KernelOptions
) -> CompiledOperator:
    return compile_candidate(_Parts(name, expr, derivative, canonical), options)


_operators: dict[tuple[str, str, KernelOptions], CompiledOperator] = {}
_operators_lock = threading.Lock()


def compile_candidate(
    candidate: CandidateLike | CompiledOperator, options: KernelOptions | None = None
) -> CompiledOperator:
    """The (process-wide, memoised) compiled operator of a candidate under ``options`` (None:
    :func:`._options.default_options`). An operator given in is returned as it is."""
    if isinstance(candidate, CompiledOperator):
        return candidate
    options = options if options is not None else default_options()
    expr, derivative = candidate.expr, candidate.derivative
    if not isinstance(expr, sympy.Basic) or not isinstance(derivative, sympy.Basic):
        raise TypeError("a candidate's expr and derivative must be sympy expressions")
    key = (sympy.srepr(expr), sympy.srepr(derivative), options)
    with _operators_lock:
        op = _operators.get(key)
        if op is None:
            canonical = str(getattr(candidate, "canonical", None) or sympy.sstr(expr))
            op = CompiledOperator(candidate.name, expr, derivative, canonical, options)
            _operators[key] = op
        return op


def resolve_backend(backend: Backend, x: Tensor, options: KernelOptions) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "triton" if x.is_cuda else options.cpu_backend
    if backend == "triton" and not x.is_cuda:
        from triton import knobs

        if not knobs.runtime.interpret:
            raise RuntimeError(
                "backend='triton' on a CPU tensor needs Triton's interpreter: set "
                "TRITON_INTERPRET=1 (or NORMFREE_TRITON_INTERPRET=1) before normfree.kernels loads"
            )
    return backend


_compile_error: str | None = None


def _disable_compile(exc: Exception) -> None:
    """torch.compile failed in this process: warn once and run the eager torch path from now on."""
    global _compile_error
    _compile_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    warnings.warn(
        f"torch.compile of the pointwise norm failed ({_compile_error}); using eager torch code",
        RuntimeWarning,
        stacklevel=3,
    )


# C compilers found missing in this process (name -> the error): every later operator that
# would build with one runs the eager path without trying again.
_missing_compilers: dict[str, str] = {}


def _native_usable(op: CompiledOperator, x: Tensor) -> bool:
    """Whether the native path runs this call: fp32/fp16/bf16 CPU input and a built library.

    fp64 (gradcheck) and empty inputs take the eager path, which computes in fp64. A missing
    compiler warns once and every later call in the process that would use it runs the eager
    path; a compiler error (a generator bug for one expression) warns once for that candidate,
    which alone falls back.
    """
    if x.dtype == torch.float64 or x.is_cuda or x.numel() == 0:
        return False  # (an empty input has nothing to compute; the eager path shapes its grads)
    if op.options.cc in _missing_compilers or "native_error" in op._compiled:
        return False
    try:
        op.native_kernels  # noqa: B018 - builds or loads the library
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        if _native.compiler(op.options.cc) is None:
            _missing_compilers[op.options.cc] = message  # no candidate can build with it
        op._compiled["native_error"] = message  # else only this candidate falls back
        warnings.warn(
            f"native CPU kernels of {op.name!r} unavailable ({message}); using eager torch code",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


class PointwiseNormFunction(torch.autograd.Function):
    """y = gamma * f(alpha * x + s) + beta with a generated forward and backward.

    Saves only x and the parameters; backward recomputes f and f' from x. Parameter gradients
    are accumulated in fp32 and returned in each parameter's dtype; dx in x's dtype.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,
        alpha: Tensor,
        s: Tensor | None,
        gamma: Tensor | None,
        beta: Tensor | None,
        op: CompiledOperator,
        backend: str,
    ) -> Tensor:
        if backend == "triton":
            from normfree.kernels import _triton_ops  # imports triton: only when used (below)

            y = _triton_ops.forward(op.triton_module, x, NormParams(alpha, s, gamma, beta))
        elif backend == "native" and _native_usable(op, x):
            y = _native.forward(op.native_kernels, x, NormParams(alpha, s, gamma, beta))
        elif backend == "compile" and _compile_error is None:
            try:
                y = op.compiled("forward")(x, alpha, s, gamma, beta)
            except Exception as exc:  # e.g. no C++ compiler: the eager path computes the same
                _disable_compile(exc)
                backend = "torch"
                y = _torch_ops.forward_math(op.torch_module.f, x, alpha, s, gamma, beta)
        else:
            backend = "torch" if backend in ("compile", "native") else backend
            y = _torch_ops.forward_math(op.torch_module.f, x, alpha, s, gamma, beta)
        ctx.save_for_backward(x, alpha, s, gamma, beta)
        ctx.op = op
        ctx.backend = backend
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, *params = ctx.saved_tensors
        p = NormParams(*params)
        alpha, s, gamma, beta = p
        op: CompiledOperator = ctx.op
        per_channel = p.s_per_channel
        if ctx.backend == "triton":
            from normfree.kernels import _triton_ops

            grads = _triton_ops.backward(op.triton_module, dy, x, p)
        elif ctx.backend == "native" and not torch.is_grad_enabled():
            grads = _native.backward(op.native_kernels, dy, x, p)
        elif ctx.backend == "compile":
            d = x.shape[-1]
            x2, dy2 = x.reshape(-1, d), dy.reshape(-1, d)
            parts = op.compiled("backward")(dy2, x2, alpha, s, gamma, per_channel)
            dx, *rest = _torch_ops.finish_fused(parts, dy2, s, per_channel)
            grads = (dx.view(x.shape), *rest)
        else:
            grads = _torch_ops.backward_eager(op.torch_module.f_and_df, dy, x, p)
        dx, d_alpha, d_s, d_gamma, d_beta = grads
        need = ctx.needs_input_grad
        return (
            dx.to(x.dtype) if need[0] else None,
            d_alpha.to(alpha.dtype).reshape(alpha.shape) if need[1] else None,
            d_s.to(s.dtype).reshape(s.shape) if s is not None and need[2] else None,
            d_gamma.to(gamma.dtype) if gamma is not None and need[3] else None,
            d_beta.to(beta.dtype) if beta is not None and need[4] else None,
            None,
            None,
        )


def pointwise_norm(
    x: Tensor,
    candidate: CandidateLike | CompiledOperator,
    alpha: Tensor,
    s: Tensor | None = None,
    gamma: Tensor | None = None,
    beta: Tensor | None = None,
    *,
    backend: Backend = "auto",
    kernels: KernelOptions | None = None,
) -> Tensor:
    """Functional form: ``gamma * f(alpha * x + s) + beta`` over the last dimension of ``x``.

    ``alpha`` is a 0-d tensor, ``s`` 0-d or ``[D]`` (or None), ``gamma``/``beta`` ``[D]`` (both or
    neither). Differentiable in all five. ``kernels``: where the generated code lives and what
    "auto" runs on CPU (a compiled operator brings its own).
    """
    if (gamma is None) != (beta is None):
        raise ValueError("gamma and beta come together (affine) or not at all")
    if alpha.dim() != 0:
        raise ValueError("alpha must be a 0-d tensor")
    op = compile_candidate(candidate, kernels)
    chosen = resolve_backend(backend, x, op.options)
    return PointwiseNormFunction.apply(x, alpha, s, gamma, beta, op, chosen)
