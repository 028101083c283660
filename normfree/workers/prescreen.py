"""Zero-cost prescreen: a few seconds at submission, before a candidate costs a full trial.

Two checks on the initialised proxy (same model and data as the preset, a fixed batch):

1. Signal propagation: one forward and backward with the diagnostics hooks, giving per slot the
   activation std entering the norm, its absmax, the residual-branch RMS and the gradient norm
   flowing back. ``std_growth`` (last slot's input std / first's) and ``grad_ratio`` (first
   slot's gradient / last's) summarise whether the signal explodes or vanishes with depth.
2. Survival and instability: ``steps`` AdamW steps at ``lr_mult`` x the preset's learning rate,
   no warmup, on a fixed batch sequence. ``survives`` is False if the loss goes non-finite or
   exceeds ``divergence_factor`` x its initial value; ``loss_ratio`` is final/initial loss.
   While stepping, :class:`~normfree.workers.diagnostics.ActivationMonitor` tracks every slot's
   activations; ``out_growth`` is the largest growth of a norm's output magnitude (what attention
   and the MLP receive) from the first step to the worst later step, ``absmax_growth`` the same
   for its input. ``unstable`` (the instability prediction) is True when the candidate
   does not survive or its outputs grow more than ``OUT_GROWTH_LIMIT`` x: a bounded f cannot
   grow its output past |gamma| + |beta|, so a large growth means nothing is containing the
   stream.

The steps, the lr multiplier and the batch are the preset's (``Preset.prescreen``): the
defaults suit a preset whose lr is moderate; a stress or calibrated screen, whose lr is already
the aggressive one, takes the steps its trial will take.

Deterministic: a fixed seed, forked RNG, the trial thread count (only ``seconds`` varies).
Returns a JSON-friendly dict; ``ok`` is False when the operator could not run (with ``error``)
or did not survive.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from normfree.settings import get_settings
from normfree.specs import NormSpec, TrialConfig
from normfree.workers import diagnostics
from normfree.workers.proxies import DEFAULT_PROXY
from normfree.workers.trainer import (
    TASKS,
    build_model,
    param_groups,
    parse_norm,
    resolve,
    trial_context,
)

OUT_GROWTH_LIMIT = 20.0  # norm-output growth (max over slots) above which we predict instability


def _growth(first: dict[str, dict[str, float]], later: dict[str, dict[str, float]], key: str):
    """Largest per-slot ratio later[key] / first[key] (None when nothing was measured)."""
    ratios = [
        later[s][key] / first[s][key]
        for s in first
        if s in later and key in first[s] and first[s][key] > 0
    ]
    return max(ratios) if ratios else None


def prescreen(
    norm: NormSpec | str, proxy: str = DEFAULT_PROXY, seed: int = 0, candidate: Any = None
) -> dict[str, Any]:
    """Signal propagation, high-lr survival and instability of ``norm`` in ``proxy``.

    ``candidate``: ``norm``'s function already parsed (the API's submissions), used as it is.
    """
    spec = parse_norm(norm) if isinstance(norm, str) else norm
    t0 = time.perf_counter()
    res = dataclasses.replace(
        resolve(TrialConfig(proxy=proxy, norm=spec, seed=seed)), candidate=candidate
    )
    p = res.preset
    steps, lr, batch = p.prescreen.steps, p.lr * p.prescreen.lr_mult, p.prescreen.batch
    bf16 = p.precision == "bf16"
    out: dict[str, Any] = {"proxy": proxy, "norm": res.norm.model_dump(), "seed": seed}
    from normfree.kernels import KernelOptions

    settings = get_settings()
    with trial_context(seed, settings.trial_threads):  # on CPU: a prescreen is seconds
        try:
            model = build_model(res, KernelOptions.from_settings(settings))
            task = TASKS[p.task](res)
            layers = diagnostics.measure(model, task.diag_loss, epoch=0)
        except Exception as exc:  # the operator cannot even run: the clearest possible verdict
            return {**out, "ok": False, "survives": False, "unstable": True, "error": str(exc)}
        out["layers"] = [
            d.model_dump(include={"layer", "input_std", "input_absmax", "branch_norm", "grad_norm"})
            for d in layers
        ]
        stds = [d.input_std for d in layers if d.input_std is not None]
        grads = [d.grad_norm for d in layers if d.grad_norm]
        out["std_growth"] = stds[-1] / stds[0] if len(stds) > 1 and stds[0] > 0 else None
        out["grad_ratio"] = grads[0] / grads[-1] if len(grads) > 1 and grads[-1] > 0 else None
        finite = all(math.isfinite(v) for d in layers for v in (d.input_std or 0, d.grad_norm or 0))

        # survival and instability: a few aggressive steps, activations monitored
        groups = param_groups(model, p.weight_decay, p.scalar_lr_mult, p.norm_lr_mult)
        for g in groups:
            g["lr"] = lr * g["lr_mult"]
        opt = torch.optim.AdamW(groups, lr=lr)
        gen = torch.Generator().manual_seed(seed)
        n = len(task.y_train)
        losses = []
        monitor = diagnostics.ActivationMonitor(model)
        first: dict[str, dict[str, float]] = {}
        model.train()
        try:
            for i in range(steps):
                idx = torch.randint(0, n, (min(batch, n),), generator=gen)
                monitor.enabled = True
                with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
                    loss = task.loss(model, idx, gen).float()
                monitor.enabled = False
                if i == 0:
                    first = monitor.take()
                losses.append(float(loss.detach()))
                if not math.isfinite(losses[-1]):
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            later = monitor.take()
        finally:
            monitor.close()
        initial, final = losses[0], losses[-1]
        survives = (
            finite
            and all(math.isfinite(v) for v in losses)
            and max(losses) <= p.divergence_factor * initial
        )
        out_growth = _growth(first, later, "train_out_absmax")
        absmax_growth = _growth(first, later, "train_absmax")
        unstable = not survives or (out_growth is not None and out_growth > OUT_GROWTH_LIMIT)
    out.update(
        ok=bool(survives),  # False: could not run, or flagged (the API's reading of "ok")
        survives=bool(survives),
        unstable=bool(unstable),
        out_growth=out_growth,
        absmax_growth=absmax_growth,
        initial_loss=initial,
        final_loss=final if math.isfinite(final) else None,
        loss_ratio=final / initial if math.isfinite(final) and initial > 0 else None,
        steps=len(losses),
        lr=lr,
        seconds=time.perf_counter() - t0,
    )
    return out
