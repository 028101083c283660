"""``train_trial(TrialConfig) -> TrialResult``: one proxy, one norm, one seed.

Pure: no database, no Ray, no settings, no process-global state left behind (the torch RNG is
forked on every device it seeds and the thread count restored), deterministic for a seed at a
fixed thread count; where it runs (threads, device) is an argument. A divergence (NaN/inf
loss, or loss above ``divergence_factor`` x the first step's loss) ends the trial with status
``diverged`` and the step; it is a result, never an exception. An invalid config (unknown proxy,
override or dataset) raises ``ValueError`` before any work; an unexpected error while training
returns status ``failed`` with the error text.

Recipe (science.md 6): AdamW, no weight decay on 1-D parameters (biases, gamma/beta, LayerScale,
per-channel s) nor on the 0-d alpha/s; linear warmup then cosine decay (ViT) or constant (DiT);
label smoothing for classification. The training loop keeps per-step losses on the device and
checks them for divergence every ``CHECK_EVERY`` steps, so it adds no per-step host syncs.
"""

from __future__ import annotations

import dataclasses
import math
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from normfree.settings import Settings
from normfree.specs import (
    BASELINES,
    EpochRecord,
    LayerDiagnostic,
    NormSpec,
    TrialConfig,
    TrialResult,
    resolve_alias,
)
from normfree.workers import diagnostics
from normfree.workers.data import Dataset, get_dataset
from normfree.workers.errors import ConfigError
from normfree.workers.proxies import PRESET_OVERRIDABLE, PROXIES, Preset, get_preset
from normfree.workers.proxies.configs import resolve_zero_init_final
from normfree.workers.proxies.dit import Diffusion
from normfree.workers.versions import trainer_version

if TYPE_CHECKING:  # the kernels (and triton's import rules) load with the first norm built
    from normfree.kernels import KernelOptions

CHECK_EVERY = 8  # steps between divergence checks (one host sync each)
EVAL_SEED = 12345  # fixed noise/timesteps/samples for diffusion evaluation, not the trial seed
# Examples in the fixed diagnostics batch: one training batch's worth. The probe runs forward and
# backward after every epoch; at 256 it cost dit-digits 0.38 s per 1.6 s epoch (23 s of a trial),
# and 64 examples (1,024 token rows per slot on the DiT) already pin the statistics down.
DIAG_BATCH = 64


def parse_norm(text: str, **fields: Any) -> NormSpec:
    """A NormSpec from CLI text: an alias (derf, dyt), baseline, catalog name, transform call or
    formula (anything ``create_norm`` resolves). ``fields`` (shift, alpha0, ...) override."""
    return resolve_alias(
        NormSpec(name=text.strip(), **{k: v for k, v in fields.items() if v is not None})
    )


def norm_factory(
    spec: NormSpec,
    affine: bool = True,
    alpha_param: str = "linear",
    candidate: Any = None,
    kernels: KernelOptions | None = None,
) -> Callable[[int], nn.Module]:
    """``dim -> norm module`` for every slot of a proxy; ``affine`` False for DiT's norms;
    ``alpha_param`` how a pointwise norm's alpha is parameterised (Preset.alpha_param);
    ``candidate`` the spec's function when the caller already parsed it; ``kernels`` where its
    generated code lives and what runs on CPU (None: the process default)."""
    spec = resolve_alias(spec)
    affine = affine and spec.affine
    from normfree.kernels import create_norm

    target = spec.model_copy(update={"affine": affine})
    # the candidate, resolved once (parsing is symbolic work), or handed over already parsed
    resolved: list[Any] = [candidate] if candidate is not None and not spec.is_baseline else []

    def make(dim: int) -> nn.Module:
        if resolved:
            return create_norm(
                resolved[0],
                dim,
                shift=spec.shift,
                affine=affine,
                alpha0=spec.alpha0,
                learn_alpha=spec.learn_alpha,
                alpha_param=alpha_param,
                kernels=kernels,
            )
        module = create_norm(target, dim, alpha_param=alpha_param, kernels=kernels)
        if getattr(module, "candidate", None) is not None:
            resolved.append(module.candidate)
        return module

    return make


# ------------------------------------------------------------------------------ resolution
def _coerce(old: Any, new: Any, name: str) -> Any:
    if isinstance(old, bool) or (old is None and isinstance(new, bool)):
        if isinstance(new, str):
            if new.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"override {name}: expected a bool, got {new!r}")
            return new.lower() in ("true", "1")
        return bool(new)
    if isinstance(old, int) and not isinstance(old, bool):
        if float(new) != int(float(new)):
            raise ValueError(f"override {name}: expected an integer, got {new!r}")
        return int(float(new))
    if isinstance(old, float):
        return float(new)
    return new


@dataclass(frozen=True)
class Resolved:
    """A TrialConfig made concrete: the preset with overrides applied, the dataset, the norm."""

    preset: Preset
    model_config: Any
    data: Dataset
    norm: NormSpec
    # The norm's function when the caller already holds it (a submission the API parsed):
    # building the model then parses nothing again. None: resolved from ``norm``.
    candidate: Any = None

    def describe(self) -> dict[str, Any]:
        out = {f"model.{k}": v for k, v in dataclasses.asdict(self.model_config).items()}
        recorded = ("dataset", "epochs", "batch_size", "lr", "weight_decay", "warmup_epochs")
        for k in (*recorded, "adam_beta2"):
            out[k] = getattr(self.preset, k)
        for k in PRESET_OVERRIDABLE:
            out[k] = getattr(self.preset, k)
        out["norm"] = self.norm.model_dump()
        return out


def resolve(config: TrialConfig, *, allow_paths: bool = False) -> Resolved:
    """Apply the TrialConfig to its preset; raises ConfigError (a ValueError) on anything invalid.

    ``allow_paths``: the dataset may be a file path (``normfree train`` only, see
    ``data.get_dataset``); studies resolve dataset names only.
    """
    try:
        return _resolve(config, allow_paths)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:  # the config's fault: retrying cannot help
        raise ConfigError(str(exc)) from exc


def _resolve(config: TrialConfig, allow_paths: bool) -> Resolved:
    preset = get_preset(config.proxy)
    upd: dict[str, Any] = {}
    for k in ("dataset", "epochs", "lr", "weight_decay", "warmup_epochs"):
        v = getattr(config, k)
        if v is not None:
            upd[k] = v
    cfg = preset.config
    data = get_dataset(upd.get("dataset", preset.dataset), allow_paths)
    c, h, w = data.image_shape
    shape_upd = {"in_chans": c, "img_size": h, "img_width": 0 if w == h else w}
    shape_upd["num_classes"] = data.num_classes
    cfg = replace(cfg, **shape_upd)
    model_fields = {f.name for f in dataclasses.fields(cfg)}
    model_upd = {}
    for k, v in config.overrides.items():
        if k in model_fields:
            model_upd[k] = _coerce(getattr(cfg, k), v, k)
        elif k in PRESET_OVERRIDABLE:
            upd[k] = _coerce(getattr(preset, k), v, k) if getattr(preset, k) is not None else v
        else:
            raise ValueError(
                f"unknown override {k!r} for {preset.name}: model fields {sorted(model_fields)}, "
                f"preset fields {list(PRESET_OVERRIDABLE)}"
            )
    cfg = replace(cfg, **model_upd)
    norm = resolve_alias(config.norm)
    if preset.task == "diffusion":
        cfg = resolve_zero_init_final(cfg, norm.name)
    preset = replace(preset, **upd)
    if preset.epochs < 1 or preset.batch_size < 1 or preset.lr <= 0:
        raise ValueError("epochs and batch_size must be >= 1 and lr > 0")
    return Resolved(preset, cfg, data, norm)


def build_model(res: Resolved, kernels: KernelOptions | None = None) -> nn.Module:
    """The proxy with every norm slot filled by the resolved norm (uses the global torch RNG);
    ``kernels`` as in :func:`norm_factory`."""
    factory = norm_factory(
        res.norm,
        affine=res.preset.norm_affine,
        alpha_param=res.preset.alpha_param,
        candidate=res.candidate,
        kernels=kernels,
    )
    return res.preset.build(res.model_config, factory)


# --------------------------------------------------------------------------- optimisation
NO_DECAY_NAMES = ("alpha", "log_alpha", "s", "gamma", "beta")


SCALAR_NAMES = ("alpha", "log_alpha", "s")  # the pointwise operator's scalars (science.md 1)


def _is_norm_param(name: str) -> bool:
    """A parameter of a norm slot (``norm1``, ``norm2``, ``norm_final``, ...)."""
    return any(part.startswith("norm") for part in name.split(".")[:-1])


def param_groups(
    model: nn.Module, weight_decay: float, scalar_lr_mult: float = 1.0, norm_lr_mult: float = 1.0
) -> list[dict[str, Any]]:
    """AdamW groups: decay only >=2-D weights that are not norm parameters.

    Norm parameters get their own learning-rate multipliers (``lr_mult`` in the group; the
    trainer multiplies each step's lr by it): ``scalar_lr_mult`` for a pointwise norm's ``alpha``
    and ``s``, ``norm_lr_mult`` for every other norm parameter (gamma/beta, LayerNorm's and
    RMSNorm's weight and bias). See ``Preset.scalar_lr_mult`` for why a proxy needs them.
    """
    decay, no_decay, scalars, norms = [], [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if _is_norm_param(name) and leaf in SCALAR_NAMES:
            scalars.append(p)
        elif _is_norm_param(name):
            norms.append(p)
        elif p.ndim < 2 or leaf in NO_DECAY_NAMES:
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "lr_mult": 1.0},
        {"params": no_decay, "weight_decay": 0.0, "lr_mult": 1.0},
        {"params": norms, "weight_decay": 0.0, "lr_mult": float(norm_lr_mult)},
        {"params": scalars, "weight_decay": 0.0, "lr_mult": float(scalar_lr_mult)},
    ]
    return [g for g in groups if g["params"]]


def lr_at(step: int, total: int, warmup: int, base: float, schedule: str) -> float:
    """Linear warmup over ``warmup`` steps, then cosine to 0 (or constant)."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    if schedule == "constant":
        return base
    progress = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@contextmanager
def trial_context(seed: int, threads: int, device: str | torch.device = "cpu") -> Iterator[None]:
    """Seed torch locally (forked RNG) and set the thread count, restoring both afterwards.

    ``torch.manual_seed`` seeds every CUDA device as well, so on a GPU their generators are
    forked too: a trial leaves no RNG state behind on any device it can touch.
    """
    prev = torch.get_num_threads()
    on_cuda = torch.device(device).type == "cuda"
    cuda_devices = list(range(torch.cuda.device_count())) if on_cuda else []
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        torch.set_num_threads(max(1, threads))
        try:
            yield
        finally:
            torch.set_num_threads(prev)


def load_splits(
    task: object, d: Dataset, p: Preset, prep: Callable[[np.ndarray, int | None], torch.Tensor]
) -> None:
    """Set ``task.x_/y_train``, ``x_/y_val`` and ``x_/y_test``: inputs through ``prep``, the
    training split cut at ``p.max_train`` and the evaluation splits at ``p.max_eval``."""
    for split, limit in (("train", p.max_train), ("val", p.max_eval), ("test", p.max_eval)):
        setattr(task, f"x_{split}", prep(getattr(d, f"x_{split}"), limit))
        setattr(task, f"y_{split}", torch.from_numpy(getattr(d, f"y_{split}")[:limit]))


def pooled_heldout(
    val: tuple[float, float, int], test: tuple[float, float, int]
) -> dict[str, float]:
    """``heldout_loss`` and ``heldout_acc``: the mean loss and accuracy over the validation and
    test images together, from each split's (loss, accuracy, count).

    Why a screen scores on both: on a 750-image split the binomial error of an accuracy near
    0.92 is ~0.01, as large as the differences the calibration facts ask about (RMSNorm vs
    LayerNorm), and no seed std shows it because every seed is scored on the same images. On
    vit-screen RMSNorm led LayerNorm by 1.2 seed stds on the validation images and trailed it
    by 0.2 on the test images (bench/results/calibration-vit-screen-heldout.md). Pooling both
    halves its variance (the error falls 1.4x); the price: the test split is no longer untouched.
    """
    (vl, va, nv), (tl, ta, nt) = val, test
    n = nv + nt
    return {"heldout_loss": (vl * nv + tl * nt) / n, "heldout_acc": (va * nv + ta * nt) / n}


# --------------------------------------------------------------------------------- tasks
class ClassifyTask:
    """Cross-entropy with label smoothing; accuracy metrics."""

    def __init__(self, res: Resolved) -> None:
        d = res.data
        mean, std = float(d.x_train.mean()), float(d.x_train.std()) or 1.0
        p = res.preset

        def prep(x: np.ndarray, limit: int | None) -> torch.Tensor:
            return (torch.from_numpy(x[:limit]) - mean) / std

        load_splits(self, d, p, prep)
        self.smoothing = p.label_smoothing
        self.mixup = p.mixup
        self.num_classes = d.num_classes
        # A ``heldout_*`` objective scores every epoch on the validation and test splits
        # together (see pooled_heldout); other presets never look at the test split mid-run.
        self.heldout = p.objective.startswith("heldout_")

    def loss(self, model: nn.Module, idx: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        x, y = self.x_train[idx], self.y_train[idx]
        if self.mixup <= 0:
            return F.cross_entropy(model(x), y, label_smoothing=self.smoothing)
        # mixup (the official ViT recipe's regulariser): one Beta(a, a) weight per batch (torch's
        # RNG, seeded per trial) and a random pairing within it from the trial's generator
        lam = float(torch.distributions.Beta(self.mixup, self.mixup).sample())
        perm = torch.randperm(len(idx), generator=gen).to(x.device)
        logits = model(lam * x + (1 - lam) * x[perm])
        ce = partial(F.cross_entropy, label_smoothing=self.smoothing)
        return lam * ce(logits, y) + (1 - lam) * ce(logits, y[perm])

    def diag_loss(self, model: nn.Module) -> torch.Tensor:
        n = min(DIAG_BATCH, len(self.y_train))
        return F.cross_entropy(
            model(self.x_train[:n]), self.y_train[:n], label_smoothing=self.smoothing
        )

    @torch.no_grad()
    def _eval(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, smoothing: float = 0.0):
        logits = torch.cat([model(b) for b in x.split(1024)])
        loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
        return float(loss), float((logits.argmax(-1) == y).float().mean())

    def evaluate(self, model: nn.Module, last: bool = True) -> dict[str, float]:
        """Validation loss and accuracy (the whole validation split at every epoch); with a
        ``heldout_*`` objective also the test split's and both pooled."""
        loss, acc = self._eval(model, self.x_val, self.y_val)
        out = {"val_loss": loss, "val_acc": acc}
        if self.heldout:
            test_loss, test_acc = self._eval(model, self.x_test, self.y_test)
            out.update(
                pooled_heldout(
                    (loss, acc, len(self.y_val)), (test_loss, test_acc, len(self.y_test))
                )
            )
        return out

    def final(self, model: nn.Module) -> tuple[dict[str, float], float]:
        """Test metrics, and the train-set loss in eval mode (training criterion, no update)."""
        loss, acc = self._eval(model, self.x_test, self.y_test)
        train_loss, train_acc = self._eval(model, self.x_train, self.y_train, self.smoothing)
        return {"test_loss": loss, "test_acc": acc, "eval_train_acc": train_acc}, train_loss


class DiffusionTask:
    """Epsilon-prediction MSE; validation loss on fixed (t, noise); Frechet distance of samples
    in a small classifier's feature space (``fd_<dataset>_clf``)."""

    # Fixed (t, noise) draws per validation image for the objective: 4 lower the metric's noise.
    # Epochs before the last are evaluated on the first of them only (a quarter of the cost: the
    # full estimate after each of dit-digits' 60 short epochs was 0.5 s per 1.6 s of training).
    # Those intermediate values feed the learning curve and the pruner, which compare trials at
    # the same epoch with the same estimator; the last epoch, hence the objective, uses all 4.
    VAL_REPEATS = 4

    def __init__(self, res: Resolved) -> None:
        d, p = res.data, res.preset
        self.dataset_key = res.preset.dataset  # the dataset trained on (after overrides)
        self.diff = Diffusion(res.model_config.timesteps)
        self.steps = res.model_config.sample_steps
        self.fd_samples = p.fd_samples
        self.num_classes = d.num_classes
        self.shape = d.image_shape

        def prep(x: np.ndarray, limit: int | None) -> torch.Tensor:
            return torch.from_numpy(x[:limit]) * 2 - 1  # [0, 1] -> [-1, 1]

        load_splits(self, d, p, prep)
        self._fixed: dict[str, tuple[torch.Tensor, ...]] = {}

    def loss(self, model: nn.Module, idx: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return self.diff.random_loss(model, self.x_train[idx], self.y_train[idx], gen)

    def _fixed_draws(self, split: str, x: torch.Tensor, y: torch.Tensor, repeats: int):
        if split not in self._fixed:
            gen = torch.Generator().manual_seed(EVAL_SEED + len(split))
            xr, yr = x.repeat(repeats, 1, 1, 1), y.repeat(repeats)
            t = torch.randint(0, self.diff.T, (len(yr),), generator=gen).to(x.device)
            noise = torch.randn(xr.shape, generator=gen).to(x.device)
            self._fixed[split] = (xr, yr, t, noise)
        return self._fixed[split]

    @torch.no_grad()
    def _fixed_loss(
        self, model: nn.Module, split: str, x, y, repeats: int, use: int | None = None
    ) -> float:
        """Mean loss over the split's fixed draws; ``use`` of the ``repeats`` passes, or all."""
        xr, yr, t, noise = self._fixed_draws(split, x, y, repeats)
        if use is not None:  # draws are laid out pass by pass: x.repeat() puts pass k at rows k*n
            rows = slice(0, use * len(y))
            xr, yr, t, noise = xr[rows], yr[rows], t[rows], noise[rows]
        total = 0.0
        for s in range(0, len(yr), 1024):
            sl = slice(s, s + 1024)
            total += float(self.diff.loss(model, xr[sl], yr[sl], t[sl], noise[sl])) * len(yr[sl])
        return total / len(yr)

    def diag_loss(self, model: nn.Module) -> torch.Tensor:
        n = min(DIAG_BATCH, len(self.y_train))
        xr, yr, t, noise = self._fixed_draws("diag", self.x_train[:n], self.y_train[:n], 1)
        return self.diff.loss(model, xr, yr, t, noise)

    def evaluate(self, model: nn.Module, last: bool = True) -> dict[str, float]:
        """Validation diffusion loss on the fixed draws: all of them when ``last``, else one per
        image (the first ``len(x_val)`` rows of the same draws: a fixed, cheaper estimator)."""
        return {
            "val_loss": self._fixed_loss(
                model, "val", self.x_val, self.y_val, self.VAL_REPEATS, use=None if last else 1
            )
        }

    def final(self, model: nn.Module) -> tuple[dict[str, float], float]:
        out = {
            "test_loss": self._fixed_loss(model, "test", self.x_test, self.y_test, self.VAL_REPEATS)
        }
        n_train = min(len(self.y_train), 1024)
        train = self._fixed_loss(model, "train", self.x_train[:n_train], self.y_train[:n_train], 1)
        if self.fd_samples > 0:
            from normfree.workers.proxies.feature_clf import fd_score, metric_name

            y = (torch.arange(self.fd_samples) % self.num_classes).to(self.x_train.device)
            samples = self.diff.sample(model, y, self.shape, self.steps, seed=EVAL_SEED)
            fd = fd_score(self.dataset_key, (samples.cpu() + 1) / 2)
            out[metric_name(self.dataset_key)] = fd if math.isfinite(fd) else float("inf")
        return out, train


TASKS = {"classify": ClassifyTask, "diffusion": DiffusionTask}


def select_device(settings: Settings) -> torch.device:
    """Where a trial trains (``settings.trial_device``; see Settings for the "auto" rule).

    On CUDA every norm slot runs the generated Triton kernels (``backend="auto"``); data is
    drawn on CPU generators and moved, so a seed means the same batches on every device.
    """
    want = settings.trial_device
    if want == "auto":
        want = "cuda" if settings.trial_gpus > 0 and torch.cuda.is_available() else "cpu"
    if want == "cuda" and not torch.cuda.is_available():
        raise ValueError("trial_device is 'cuda' but no CUDA device is visible to this worker")
    return torch.device(want)


def move_task(task: object, device: torch.device) -> None:
    """Move a task's data tensors (attributes) to ``device``; a no-op on CPU."""
    if device.type == "cpu":
        return
    for name, value in vars(task).items():
        if isinstance(value, torch.Tensor):
            setattr(task, name, value.to(device))


# ------------------------------------------------------------------------ failure to train
def _blowup_reason(loss: float, first: float, step: int) -> str:
    if not math.isfinite(loss):
        return f"loss not finite at step {step}"
    return f"loss {loss:.4g} at step {step}, {loss / first:.3g}x the first step's {first:.4g}"


def no_learning(p: Preset, metrics: dict[str, float], first: float, task: object) -> str | None:
    """Why a completed run counts as *failed to train* (science.md 7), or None if it learned.

    A run must close at least ``p.min_learning`` of the gap between the untrained level and
    perfection: classification, validation accuracy above chance by that fraction of
    (1 - chance); diffusion, the validation loss below the first step's loss (the untrained
    model's, about that of predicting zero noise) by that fraction. A run that ends near the
    untrained level has failed as surely as one whose loss went to NaN.
    """
    if p.min_learning <= 0:
        return None
    if p.task == "classify":
        acc = metrics.get("val_acc")
        chance = 1.0 / max(2, int(getattr(task, "num_classes", 10)))
        if acc is not None and (acc - chance) < p.min_learning * (1 - chance):
            return f"ended near chance: val_acc {acc:.3g} (chance {chance:.3g})"
        return None
    loss = metrics.get("val_loss")
    learned = loss is not None and math.isfinite(first) and first > 0
    if learned and (first - loss) < p.min_learning * first:  # type: ignore[operator]
        return f"ended near the untrained loss: val_loss {loss:.4g} (first step {first:.4g})"
    return None


# -------------------------------------------------------------------------------- trainer
def train_trial(
    config: TrialConfig,
    report: Callable[[EpochRecord], bool | None] | None = None,
    *,
    threads: int = 1,
    device: str | torch.device = "cpu",
    allow_paths: bool = False,
    kernels: KernelOptions | None = None,
) -> TrialResult:
    """Train ``config.proxy`` with ``config.norm`` in every slot; see the module docstring.

    ``threads``, ``device`` and ``kernels`` (the kernel cache and CPU backend) are where and how
    it runs, not what it computes; the caller decides them (a Ray task from its settings, see
    :func:`select_device` and ``KernelOptions.from_settings``), so this function reads no
    settings and two calls with the same arguments do the same work. ``allow_paths`` lets the
    dataset be a file path (``normfree train``; see ``resolve``).
    """
    t_start = time.perf_counter()
    res = resolve(config, allow_paths=allow_paths)  # ConfigError before any work
    p = res.preset
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is 'cuda' but no CUDA device is visible to this worker")
    curves: list[EpochRecord] = []
    diags: list[LayerDiagnostic] = []
    status, diverged_at, error = "complete", None, None
    failure: str | None = None  # why a diverged run failed to train
    first = math.nan  # the first step's loss: the untrained model's
    spike_step: int | None = None
    metrics: dict[str, float] = {}
    eval_train_loss = None
    train_time = 0.0
    with trial_context(config.seed, threads, device):
        try:
            model = build_model(res, kernels).to(device)
            task = TASKS[p.task](res)
            move_task(task, device)
            gen = torch.Generator().manual_seed(config.seed)
            groups = param_groups(model, p.weight_decay, p.scalar_lr_mult, p.norm_lr_mult)
            opt = torch.optim.AdamW(groups, lr=p.lr, betas=(0.9, p.adam_beta2))
            n = len(task.y_train)
            batches = [None] * math.ceil(n / p.batch_size)
            total = p.epochs * len(batches)
            warmup = round(p.warmup_epochs * len(batches))
            diags += diagnostics.measure(model, task.diag_loss, epoch=0)
            # per-slot maxima over the training steps (why a run failed): enabled only around the
            # training forward, read once per epoch, so probes and evaluation do not count
            monitor = diagnostics.ActivationMonitor(model)
            loss_hist: list[torch.Tensor] = []  # per-step losses, for the first-spike step
            step, threshold = 0, math.inf
            bf16 = p.precision == "bf16"
            for epoch in range(1, p.epochs + 1):
                t0 = time.perf_counter()
                model.train()
                perm = torch.randperm(n, generator=gen)
                losses = torch.zeros(len(batches))
                checked = 0
                for i, idx in enumerate(perm.split(p.batch_size)):
                    lr = lr_at(step, total, warmup, p.lr, p.schedule)
                    for g in opt.param_groups:
                        g["lr"] = lr * g.get("lr_mult", 1.0)
                    monitor.enabled = True
                    with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
                        loss = task.loss(model, idx, gen).float()
                    monitor.enabled = False
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    if p.grad_clip > 0:
                        nn.utils.clip_grad_norm_(model.parameters(), p.grad_clip)
                    opt.step()
                    losses[i] = loss.detach()
                    step += 1
                    if step == 1:
                        first = float(loss.detach())
                        threshold = (
                            p.divergence_factor * first if math.isfinite(first) else -math.inf
                        )
                    if (i + 1) % CHECK_EVERY == 0 or i + 1 == len(batches):
                        window = losses[checked : i + 1]
                        bad = ~torch.isfinite(window) | (window > threshold)
                        if bool(bad.any()):
                            first_bad = int(bad.nonzero()[0, 0])
                            diverged_at = step - (i + 1 - checked) + first_bad + 1
                            failure = _blowup_reason(float(window[first_bad]), first, diverged_at)
                            break
                        checked = i + 1
                train_time += time.perf_counter() - t0
                loss_hist.append(losses[: i + 1].clone())
                if diverged_at is not None:
                    status = "diverged"
                    diags += diagnostics.monitor_records(monitor.take(), epoch)
                    break
                train_loss = float(losses.mean())
                model.eval()  # no dropout or batch statistics today; stays right if added
                val = task.evaluate(model, last=epoch == p.epochs)
                if not all(math.isfinite(v) for v in val.values()):
                    status, diverged_at = "diverged", step
                    failure = f"validation metrics not finite after step {step}"
                    diags += diagnostics.monitor_records(monitor.take(), epoch)
                    break
                rec = EpochRecord(
                    epoch=epoch,
                    step=step,
                    train_loss=train_loss,
                    val_loss=val.get("val_loss"),
                    metrics=val,
                    lr=lr,
                    wall_time_s=time.perf_counter() - t_start,
                )
                curves.append(rec)
                diags += diagnostics.measure(
                    model, task.diag_loss, epoch=epoch, train_stats=monitor.take()
                )
                if report is not None and report(rec):
                    status = "pruned"
                    metrics = {**val, "train_loss": train_loss}
                    break
            monitor.close()
            ratio = diagnostics.SPIKE_RATIOS.get(p.task, diagnostics.SPIKE_RATIO)
            spike_step = diagnostics.first_spike(torch.cat(loss_hist).tolist(), ratio=ratio)
            if diverged_at is not None and (spike_step is None or spike_step > diverged_at):
                spike_step = diverged_at  # a divergence is a spike, even in the first steps
            if status == "complete":
                model.eval()
                final, eval_train_loss = task.final(model)
                metrics = {**curves[-1].metrics, "train_loss": curves[-1].train_loss, **final}
                metrics["samples_per_s"] = step * p.batch_size / max(train_time, 1e-9)
                failure = no_learning(p, metrics, first, task)
                if failure is not None:
                    status = "diverged"  # failed to train: counted as a failure, not a score
        except Exception as exc:  # a bug or a kernel failure: a failed trial, with its reason
            status, error = "failed", "".join(traceback.format_exception_only(exc)).strip()
            error += "\n" + traceback.format_exc(limit=-3)
    if status == "diverged" and diverged_at is not None:
        metrics = {}  # a blow-up leaves no meaningful final metrics
    return TrialResult(
        status=status,
        metrics=metrics,
        objective=p.objective,
        direction=p.direction,
        curves=curves,
        diagnostics=diags,
        eval_train_loss=eval_train_loss,
        diverged_at_step=diverged_at,
        spike_step=spike_step,
        failure=failure if status == "diverged" else None,
        train_time_s=train_time,
        total_time_s=time.perf_counter() - t_start,
        error=error,
        config=res.describe(),
        code_version=trainer_version(),
    )


__all__ = [
    "BASELINES",
    "PROXIES",
    "build_model",
    "norm_factory",
    "param_groups",
    "parse_norm",
    "resolve",
    "resolve_alias",
    "train_trial",
]
