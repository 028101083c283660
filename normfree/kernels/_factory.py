"""``create_norm`` (the one resolver, as timm's) and ``swap_norms``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from normfree.kernels._module import AlphaParam, PointwiseNorm, Shift
from normfree.kernels._ops import Backend
from normfree.kernels._options import KernelOptions
from normfree.search_space import catalog, resolver
from normfree.search_space.baselines import NAMES as BASELINE_NAMES
from normfree.specs import NORM_ALIASES, NormSpec, resolve_alias

# The baselines' modules, by name (``search_space.baselines`` lists them with their citations):
# ``(dim, affine) -> module``. Every other name is a paper alias (``specs.NORM_ALIASES``) or a
# pointwise function the catalog resolves.
BASELINE_MODULES: dict[str, Callable[[int, bool], nn.Module]] = {
    "layernorm": lambda dim, affine: nn.LayerNorm(dim, elementwise_affine=affine),
    "rmsnorm": lambda dim, affine: nn.RMSNorm(dim, elementwise_affine=affine),
    "identity": lambda dim, affine: nn.Identity(),
}
assert tuple(BASELINE_MODULES) == BASELINE_NAMES, "one module per baseline"


def _resolve_candidate(name: str, formula: str | None) -> Any:
    """``formula`` (a user formula, or a baked definition naming no stored candidate) under the
    name ``name``; else ``name`` as the catalog knows it. Never a database."""
    if formula is not None:
        return resolver.resolve(formula, name=name)
    return catalog.resolve(name)


def create_norm(
    spec: str | NormSpec | Any,
    dim: int,
    *,
    shift: Shift | None = None,
    affine: bool | None = None,
    alpha0: float | None = None,
    learn_alpha: bool | None = None,
    alpha_param: AlphaParam = "linear",
    backend: Backend = "auto",
    kernels: KernelOptions | None = None,
) -> nn.Module:
    """A norm layer for ``dim`` channels from a name, a formula, a Candidate or a NormSpec.

    Strings: the baselines (:data:`BASELINE_MODULES`: ``nn.LayerNorm``, ``nn.RMSNorm``,
    ``nn.Identity``), the papers' aliases (``"derf"`` is erf with a scalar shift, ``"dyt"`` tanh),
    else ``catalog.resolve`` (a catalog name, a transform call such as ``"shift_h(erf, 0.5)"``,
    or a formula). A NormSpec brings its own options; keyword arguments given here override
    them. Defaults: shift "none", affine on, alpha0 0.5, alpha learnable (science.md section 1).
    ``backend`` and ``kernels`` go to :class:`PointwiseNorm`.
    """
    if isinstance(spec, str) and spec.strip().lower() in NORM_ALIASES:
        spec = NormSpec(name=spec.strip().lower())
    if isinstance(spec, NormSpec):
        spec = resolve_alias(spec)
        shift = spec.shift if shift is None else shift
        affine = spec.affine if affine is None else affine
        alpha0 = spec.alpha0 if alpha0 is None else alpha0
        learn_alpha = spec.learn_alpha if learn_alpha is None else learn_alpha
        if spec.is_baseline:
            return create_norm(spec.name, dim, affine=affine)
        candidate = _resolve_candidate(spec.name, spec.formula)
    elif isinstance(spec, str):
        key = spec.strip().lower()
        if key in BASELINE_MODULES:
            return BASELINE_MODULES[key](dim, True if affine is None else affine)
        candidate = _resolve_candidate(spec, None)
    elif hasattr(spec, "expr") and hasattr(spec, "derivative"):
        candidate = spec
    else:
        raise TypeError(f"cannot make a norm from {type(spec).__name__}")
    return PointwiseNorm(
        candidate,
        dim,
        shift=shift or "none",
        affine=True if affine is None else affine,
        alpha0=0.5 if alpha0 is None else alpha0,
        learn_alpha=True if learn_alpha is None else learn_alpha,
        alpha_param=alpha_param,
        backend=backend,
        kernels=kernels,
    )


def swap_norms(model: nn.Module, factory: Callable[[int], nn.Module]) -> nn.Module:
    """Replace every ``nn.LayerNorm`` in ``model`` (in place) by ``factory(dim)``; returns model.

    The new module moves to the old one's device and dtype. Only 1-D normalized shapes map to a
    channel count; anything else is an error rather than a silent skip.
    """
    targets = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, nn.LayerNorm)]
    for name, old in targets:
        if len(old.normalized_shape) != 1:
            raise ValueError(f"{name}: LayerNorm over {old.normalized_shape} is not per-channel")
        new = factory(int(old.normalized_shape[0]))
        ref = next(iter(old.parameters()), None)
        if ref is not None:
            new = new.to(device=ref.device, dtype=ref.dtype)
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if not name:
            raise ValueError("the model itself is a LayerNorm: nothing to swap into")
        setattr(parent, attr, new)
    return model
