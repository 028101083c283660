"""How much of each norm slot's input a flat centre leaves alive at init, per lab variant.

A flat centre of half-width lam passes no gradient where |u| <= lam (u = alpha0 * x). Whether a
screen can train such a function depends on how many entries of each slot lie outside it per
step, so this measures, at init (seed 0, the first ``--images`` training images), the std of u
and the fraction of entries with |u| > lam for lam in 0.5, 1, 2, 3, in the first block's norm,
the last block's second norm and the final norm (after pooling). Variants are those of a
``bench/lab/run.py`` spec (the ``variants`` object).

    python bench/lab/tails.py bench/lab/specs/flat-centre-brightness.json

Prints one JSON object per variant, the last line being all of them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

LAMS = (0.5, 1.0, 2.0, 3.0)
SLOTS = ("blocks.0.norm1", "norm_final")


def _lab() -> Any:
    spec = importlib.util.spec_from_file_location("lab", Path(__file__).with_name("run.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(variant: str, images: int, alpha0: float = 0.5) -> dict[str, Any]:
    import torch

    from normfree.specs import NormSpec, TrialConfig
    from normfree.workers.trainer import ClassifyTask, build_model, resolve

    torch.manual_seed(0)
    res = resolve(TrialConfig(proxy=variant, norm=NormSpec(name="erf"), seed=0))
    model, task = build_model(res), ClassifyTask(res)
    caught: dict[str, list[torch.Tensor]] = {}
    last_block = max(n for n, _ in model.named_modules() if n.endswith("norm2"))
    for name, module in model.named_modules():
        if name in (*SLOTS, last_block):
            module.register_forward_hook(
                lambda m, inp, out, name=name: caught.setdefault(name, []).append(
                    inp[0].detach().flatten()
                )
            )
    with torch.no_grad():
        for i in range(0, images, 64):
            model(task.x_train[i : i + 64])
    out: dict[str, Any] = {}
    for name, parts in caught.items():
        u = alpha0 * torch.cat(parts)
        out[name] = {
            "u_std": round(float(u.std()), 4),
            **{f"alive_{lam:g}": float((u.abs() > lam).float().mean()) for lam in LAMS},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", type=Path)
    ap.add_argument("--images", type=int, default=1024)
    args = ap.parse_args()
    variants = json.loads(args.spec.read_text())["variants"]
    _lab().register_variants(variants)
    rows = {name: measure(name, args.images) for name in variants}
    for name, row in rows.items():
        print(json.dumps({"variant": name, **row}))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
