"""Per-norm-slot diagnostics: what each operator's parameters and activations are doing.

A *slot* is a module attribute named ``norm*`` (``blocks.3.norm1``, ``norm_final``): the proxies
keep norms as explicit attributes so this module finds them by name, whatever class fills them.

Measured on one fixed batch (forward + backward with temporary hooks), once at initialisation
(epoch 0) and after every epoch, so the training loop itself carries no hooks and no syncs:

- ``alpha``, ``s_mean`` (and ``extra.s_std`` for a per-channel s), ``gamma``/``beta`` mean and std
  (LayerNorm's ``weight``/``bias`` count as gamma/beta);
- ``input_std`` / ``input_absmax``: the activation entering the slot (plot alpha against 1/std);
- ``branch_norm``: RMS of the residual branch the slot feeds (the proxy's ``branch_of`` map);
- ``grad_norm``: L2 norm of d loss / d (slot input), the gradient flowing back through the slot;
  ``extra.param_grad_norm``: L2 norm of the gradient on the slot's own parameters.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from normfree.specs import LayerDiagnostic

# Parameter names that play the operator's four roles (LayerNorm/RMSNorm use weight/bias).
ROLE_NAMES = {
    "alpha": ("alpha",),
    "s": ("s",),
    "gamma": ("gamma", "weight"),
    "beta": ("beta", "bias"),
}


def norm_slots(model: nn.Module) -> dict[str, nn.Module]:
    """The model's norm slots by qualified name, in module order."""
    return {
        name: mod
        for name, mod in model.named_modules()
        if name and name.rsplit(".", 1)[-1].startswith("norm")
    }


def branch_module(model: nn.Module, slot: str) -> nn.Module | None:
    """The module whose output is the residual branch fed by ``slot`` (None for the final norm)."""
    parent_name, _, attr = slot.rpartition(".")
    branch_of: dict[str, str] = getattr(model, "branch_of", {})
    if attr not in branch_of:
        return None
    parent = model.get_submodule(parent_name) if parent_name else model
    return getattr(parent, branch_of[attr], None)


def _param(mod: nn.Module, role: str) -> torch.Tensor | None:
    for n in ROLE_NAMES[role]:
        p = getattr(mod, n, None)
        if isinstance(p, torch.Tensor):
            return p
    return None


def _f(t: torch.Tensor) -> float:
    return float(t.detach().float())


def measure(
    model: nn.Module, loss_fn: Callable[[nn.Module], torch.Tensor], epoch: int
) -> list[LayerDiagnostic]:
    """Run ``loss_fn(model)`` forward and backward with hooks; return one record per slot.

    Leaves ``.grad`` cleared (set to None) so the optimiser never sees the probe's gradients.
    """
    slots = norm_slots(model)
    stats: dict[str, dict[str, float]] = {name: {} for name in slots}
    handles = []

    def on_norm(name: str):
        def hook(_mod: nn.Module, inputs: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
            x = inputs[0].detach()
            stats[name]["input_std"] = _f(x.float().std())
            stats[name]["input_absmax"] = _f(x.abs().max())
            if inputs[0].requires_grad:
                inputs[0].register_hook(
                    lambda g: stats[name].__setitem__("grad_norm", _f(g.float().norm())) or None
                )

        return hook

    def on_branch(name: str):
        def hook(_mod: nn.Module, _inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            stats[name]["branch_norm"] = _f(out.detach().float().pow(2).mean().sqrt())

        return hook

    for name, mod in slots.items():
        handles.append(mod.register_forward_hook(on_norm(name)))
        br = branch_module(model, name)
        if br is not None:
            handles.append(br.register_forward_hook(on_branch(name)))
    model.zero_grad(set_to_none=True)
    try:
        loss = loss_fn(model)
        loss.backward()
    finally:
        for h in handles:
            h.remove()

    out = []
    for name, mod in slots.items():
        st = stats[name]
        rec: dict = {"epoch": epoch, "layer": name, "extra": {}}
        for key in ("input_std", "input_absmax", "branch_norm", "grad_norm"):
            if key in st:
                rec[key] = st[key]
        alpha, s = _param(mod, "alpha"), _param(mod, "s")
        if alpha is not None:
            rec["alpha"] = _f(alpha.mean())
        if s is not None:
            rec["s_mean"] = _f(s.mean())
            if s.numel() > 1:
                rec["extra"]["s_std"] = _f(s.std())
        for role in ("gamma", "beta"):
            p = _param(mod, role)
            if p is not None:
                rec[f"{role}_mean"] = _f(p.mean())
                rec[f"{role}_std"] = _f(p.std()) if p.numel() > 1 else 0.0
        grads = [p.grad for p in mod.parameters() if p.grad is not None]
        if grads:
            rec["extra"]["param_grad_norm"] = _f(torch.stack([g.norm() for g in grads]).norm())
        out.append(LayerDiagnostic(**rec))
    model.zero_grad(set_to_none=True)
    return out
