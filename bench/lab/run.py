"""Screen-design lab: train (variant preset, norm, seed) jobs in a pool, one JSON row each.

A variant is a registered preset with fields replaced (``changes``: preset fields; ``model``:
model-config fields), registered inside each worker process under its own name, so
experiments on a screen's recipe need no edit of the registry. Rows keep the final metrics,
the per-epoch metrics, and a per-slot summary of the diagnostics (alpha, s, input std at
epoch 0 and at the end) for mechanism work.

    python bench/lab/run.py SPEC.json OUT.jsonl [--workers 2]

SPEC: {"variants": {"name": {"base": "vit-screen-heldout", "changes": {...}, "model": {...}}},
       "jobs": [{"variant": "name", "norm": {"name": "erf"}, "seed": 0}, ...]}
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1]


def _bench_module(name: str) -> Any:
    """A module of bench/ (``resumable``), loaded from its file: the lab runs as a script from
    any directory, and bench/ is not a package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_VARIANTS: dict[str, Any] = {}


def register_variants(variants: dict[str, Any]) -> None:
    from dataclasses import replace

    from normfree.workers import data
    from normfree.workers.proxies import PROXIES, register

    for name, v in variants.items():
        ds = v.get("dataset_def")
        if ds and ds["name"] not in data.DATASETS:
            data.DATASETS[ds["name"]] = _contrast_loader(ds)
        if name in PROXIES and name not in _VARIANTS:
            continue  # a registered preset itself
        base = PROXIES[v.get("base", "vit-screen-heldout")]
        changes = dict(v.get("changes", {}))
        if "extra" in changes:
            changes["extra"] = {**base.extra, **changes["extra"]}
        cfg = replace(base.config, **v.get("model", {}))
        if name not in PROXIES:
            register(replace(base, name=name, config=cfg, **changes))
        _VARIANTS[name] = v


def _contrast_loader(ds: dict[str, Any]) -> Any:
    def load() -> Any:
        import numpy as np

        from normfree.workers import data

        base = data.load_builtin(ds.get("base", "mnist"))
        rng = np.random.default_rng(ds.get("seed", 1))
        parts = []
        if ds.get("mode") == "mnistm":  # MNIST-M-style: |photo crop - digit| (Ganin 2015)
            from sklearn.datasets import load_sample_images

            photos = [i.astype(np.float32) / 255 for i in load_sample_images().images]
            for split in ("train", "val", "test"):
                x = getattr(base, f"x_{split}")
                out = np.empty((len(x), 3, 28, 28), np.float32)
                for i in range(len(x)):
                    ph = photos[rng.integers(len(photos))]
                    r, c = rng.integers(ph.shape[0] - 28), rng.integers(ph.shape[1] - 28)
                    out[i] = np.abs(ph[r : r + 28, c : c + 28].transpose(2, 0, 1) - x[i])
                parts += [out, getattr(base, f"y_{split}")]
            return data.Dataset(ds["name"], *parts, num_classes=base.num_classes)
        for split in ("train", "val", "test"):
            x = getattr(base, f"x_{split}").copy()
            if ds.get("mode") == "noise":  # fixed pixel noise: no two tokens identical
                g = 1.0
                x = x + ds["sigma"] * rng.standard_normal(x.shape)
            elif ds.get("mode") == "brightness":  # one brightness offset per image, N(0, sigma)
                # (gain_sigma: the offset over a random per-image gain; 0 in every recorded
                # spec, its draw kept so that they reproduce)
                g = np.exp(ds.get("gain_sigma", 0.0) * rng.standard_normal((len(x), 1, 1, 1)))
                x = x + ds["sigma"] * rng.standard_normal((len(x), 1, 1, 1)) / g
            elif ds.get("mode", "image") == "image":
                g = np.exp(ds["sigma"] * rng.standard_normal((len(x), 1, 1, 1)))
            else:
                p = ds.get("patch", 7)
                h, w = x.shape[2] // p, x.shape[3] // p
                g = np.exp(ds["sigma"] * rng.standard_normal((len(x), 1, h, w)))
                g = g.repeat(p, 2).repeat(p, 3)
            parts += [(x * g).astype(np.float32), getattr(base, f"y_{split}")]
        return data.Dataset(ds["name"], *parts, num_classes=base.num_classes)

    return load


_ATTN: list[tuple[float, float]] = []


def _probe_attention() -> None:
    """Record, for every training forward of a ViT attention layer, the largest attention
    logit and the lowest mean attention entropy over its heads: the observables of attention
    logit growth (Dehghani et al. 2023, Wortsman et al. 2023), for the growth-rate diagnosis
    (diagnoses section 2j). Eval forwards (no grad) are not recorded."""
    import math

    import torch

    from normfree.workers.proxies import vit

    base = vit.Attention.forward
    if getattr(base, "probed", False):
        return

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            with torch.no_grad():
                b, n, d = x.shape
                hs = d // self.heads
                qkv = self.qkv(x).float().view(b, n, 3, self.heads, hs)
                q, k, _ = qkv.permute(2, 0, 3, 1, 4).unbind(0)
                logits = q @ k.transpose(-1, -2) / math.sqrt(hs)
                p = logits.softmax(-1)
                ent = -(p * p.clamp_min(1e-30).log()).sum(-1).mean((0, 2))  # per head
                _ATTN.append((float(logits.abs().max()), float(ent.min())))
        return base(self, x)

    forward.probed = True  # type: ignore[attr-defined]
    vit.Attention.forward = forward  # type: ignore[method-assign]


def _attention_summary(depth: int) -> dict[str, Any]:
    """Per optimizer step (one record per layer, ``depth`` layers a step): the largest logit
    over the layers, at the first step, over the last tenth and over the run, and the lowest
    head entropy over the last tenth (a uniform head over 17 tokens has log 17 = 2.83)."""
    steps = [_ATTN[i : i + depth] for i in range(0, len(_ATTN) - depth + 1, depth)]
    if not steps:
        return {}
    mx = [max(a for a, _ in s) for s in steps]
    ent = [min(e for _, e in s) for s in steps]
    tail = max(1, len(steps) // 10)
    every = max(1, len(steps) // 20)
    return {
        "steps": len(steps),
        "max_logit_first": mx[0],
        "max_logit_last": max(mx[-tail:]),
        "max_logit_run": max(mx),
        "min_entropy_last": min(ent[-tail:]),
        "curve": [round(v, 2) for v in mx[::every]],
    }


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    register_variants(job["_variants"])
    if job.get("probe") == "attention":
        _ATTN.clear()
        _probe_attention()
    from normfree.kernels import KernelOptions
    from normfree.settings import get_settings
    from normfree.specs import NormSpec, TrialConfig
    from normfree.workers.trainer import train_trial

    t0 = time.perf_counter()
    cfg = TrialConfig(
        proxy=job["variant"],
        norm=NormSpec(**job["norm"]),
        seed=job["seed"],
        epochs=job.get("epochs"),
        overrides=job.get("overrides", {}),
    )
    r = train_trial(cfg, kernels=KernelOptions.from_settings(get_settings()))
    diag: dict[str, dict[str, Any]] = {}
    last = max((d.epoch for d in r.diagnostics), default=0)
    for d in r.diagnostics:
        if d.epoch in (0, last):
            tag = "init" if d.epoch == 0 else "end"
            diag.setdefault(d.layer, {})[tag] = {
                "alpha": d.alpha,
                "s": d.s_mean,
                "in_std": d.input_std,
                "in_absmax": d.input_absmax,
                "branch": d.branch_norm,
                "grad": d.grad_norm,
                **{k: v for k, v in d.extra.items() if k.startswith("train_")},
            }
    return {
        "variant": job["variant"],
        "norm": job["norm"],
        "seed": job["seed"],
        "tag": job.get("tag"),
        "status": r.status,
        "failure": r.failure,
        "error": r.error,
        "objective": r.objective,
        "value": r.value,
        "metrics": r.metrics,
        "eval_train_loss": r.eval_train_loss,
        "diverged_at_step": r.diverged_at_step,
        "curves": [{"epoch": c.epoch, "train_loss": c.train_loss, **c.metrics} for c in r.curves],
        "diag": diag,
        **({"attn": _attention_summary(job["depth"])} if job.get("probe") == "attention" else {}),
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    spec = json.loads(Path(args.spec).read_text())
    out = Path(args.out)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["variant"], json.dumps(r["norm"], sort_keys=True), r["seed"]))
    probe = {k: spec[k] for k in ("probe", "depth") if k in spec}
    jobs = [
        {**j, "_variants": spec["variants"], **probe}
        for j in spec["jobs"]
        if (j["variant"], json.dumps(j["norm"], sort_keys=True), j["seed"]) not in done
    ]
    train_rows = _bench_module("resumable").train_rows

    train_rows(run_one, jobs, out, workers=args.workers, desc=out.stem)


if __name__ == "__main__":
    main()
