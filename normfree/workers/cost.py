"""What a study may ask for, and what it will cost, checked before anything is written.

One gate for the REST API and the CLI (:func:`check_study`), so a study either passes whole or
is refused with every reason at once:

- **params** (``StudySpec.params``) against :class:`StudyParams`: strict types (``"affine": "no"``
  is not a boolean, ``seed0: 1.5`` not an integer), finite numbers in sensible ranges (an lr of
  -1 or 1e308, a warmup of 1e9 epochs and a seed of 10**30 are refused, the last one because it
  would not even fit the database's integer);
- **overrides** (``params.overrides`` and the model options of an options study) against the
  preset: the key must be a field of the preset's config dataclass or one of the trainer's
  overridable preset fields (``__init__`` is neither), and the value must have the field's type and
  lie in its range (:data:`RANGES`; a ViT of width 10**9 is not a proxy);
- **datasets** by name only (``workers.data.check_dataset``);
- **cost**: the estimated trial-seconds, the sum over planned trials of the preset's measured
  seconds per epoch (``Preset.epoch_cost``) x epochs x how much more work the trial asks for
  than the measurement (model FLOPs per sample against the measured config, the training-set
  size), must stay under ``NORMFREE_MAX_STUDY_TRIAL_SECONDS``.

The estimate is deliberately simple (a proxy for "how much CPU will this buy"), documented as an
estimate, and shown on creation so a user sees what they asked for.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from normfree.settings import Settings, get_settings
from normfree.specs import BASELINES, StudySpec, TrialConfig
from normfree.workers.errors import ConfigError
from normfree.workers.kinds import StudyParams
from normfree.workers.kinds.base import MAX_EPOCHS, MAX_SEED

# Allowed ranges of numeric overrides: (low, high), both inclusive. A field not listed takes
# any finite value within +-1e6 of its type; choices for text fields are listed in CHOICES.
RANGES: dict[str, tuple[float, float]] = {
    "dim": (8, 1024),
    "depth": (1, 24),
    "heads": (1, 32),
    "mlp_ratio": (0.25, 8.0),
    "patch": (1, 64),
    "img_size": (1, 512),
    "img_width": (0, 512),
    "in_chans": (1, 16),
    "num_classes": (2, 1000),
    "timesteps": (2, 1000),
    "sample_steps": (1, 1000),
    "layerscale_init": (0.0, 10.0),
    "init_fan_in_ref": (0, 100_000),
    "batch_size": (1, 4096),
    "label_smoothing": (0.0, 0.5),
    "divergence_factor": (1.0, 1000.0),
    "grad_clip": (0.0, 1000.0),
    "max_train": (1, 10_000_000),
    "max_eval": (1, 10_000_000),
    "fd_samples": (0, 10_000),
}
CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": ("cosine", "constant"),
    "precision": ("fp32", "bf16"),
    "init_scope": ("patch", "all"),
    "pos_embed": ("learned", "sincos"),
}
_NORM_OPTION_RANGES = {"alpha0": (1e-6, 100.0)}


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError("must be a finite number")
    return v


def check_finite(obj: Any, where: str = "params") -> None:
    """Refuse NaN and +-Infinity anywhere in a JSON-like value (JSON parsers let them in)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ConfigError(f"{where}: {obj} is not a finite number")
    if isinstance(obj, dict):
        for k, v in obj.items():
            check_finite(v, f"{where}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            check_finite(v, f"{where}[{i}]")


def _describe(exc: ValidationError, prefix: str) -> list[str]:
    out = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        out.append(f"{prefix}.{loc}: {err.get('msg', 'invalid')}" if loc else err.get("msg", ""))
    return out


def _range_pair(name: str, pair: tuple[float, float] | None, lo: float, hi: float) -> list[str]:
    if pair is None:
        return []
    a, b = pair
    if not (lo <= a <= b <= hi):
        return [f"params.{name}: needs {lo:g} <= low <= high <= {hi:g}, got [{a:g}, {b:g}]"]
    return []


def validate_params(
    spec: StudySpec, settings: Settings | None = None
) -> tuple[StudyParams | None, list[str]]:
    """The parsed params and every problem found in them (an empty list: all good)."""
    problems: list[str] = []
    try:
        check_finite(spec.params, "params")
        check_finite(spec.options, "options")
    except ConfigError as exc:
        return None, [str(exc)]
    try:
        params = StudyParams.model_validate(spec.params)
    except ValidationError as exc:
        return None, _describe(exc, "params")
    if params.seed0 + spec.seeds - 1 > MAX_SEED:
        problems.append(f"params.seed0: seed0 + seeds must stay below {MAX_SEED}")
    if spec.epochs is not None and not (1 <= spec.epochs <= MAX_EPOCHS):
        problems.append(f"epochs: must be in [1, {MAX_EPOCHS}]")
    problems += _range_pair("alpha0_range", params.alpha0_range, 1e-6, 100.0)
    problems += _range_pair("lr_range", params.lr_range, 1e-8, 10.0)
    if params.dataset is not None:
        from normfree.workers.data import check_dataset

        try:
            check_dataset(params.dataset, (settings or get_settings()).data_root)
        except ConfigError as exc:
            problems.append(f"params.dataset: {exc}")
    return params, problems


def _field_defaults(proxy: str) -> dict[str, Any]:
    """Every overridable field of the preset with its default (its type is the allowed type)."""
    from normfree.workers.proxies import PRESET_OVERRIDABLE, PROXIES

    preset = PROXIES[proxy]
    out = {f.name: getattr(preset.config, f.name) for f in dataclasses.fields(preset.config)}
    out.update({k: getattr(preset, k) for k in PRESET_OVERRIDABLE})
    return out


def check_override(proxy: str, key: str, value: Any) -> str | None:
    """Why ``key=value`` is not a valid override of ``proxy`` (None: it is)."""
    defaults = _field_defaults(proxy)
    if key not in defaults:
        return f"unknown override {key[:64]!r} for {proxy}; allowed: {sorted(defaults)}"
    old = defaults[key]
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key}: {value} is not a finite number"
    if isinstance(old, bool) or (old is None and key == "zero_init_final"):
        if isinstance(value, bool):
            return None
        return f"{key}: expected true or false, got {value!r}"
    if key in CHOICES:
        return None if value in CHOICES[key] else f"{key}: choose from {list(CHOICES[key])}"
    if isinstance(old, str):
        return None if isinstance(value, str) and len(value) <= 64 else f"{key}: expected text"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key}: expected a number, got {value!r}"
    if (isinstance(old, int) or old is None) and float(value) != int(value):
        return f"{key}: expected an integer, got {value!r}"
    lo, hi = RANGES.get(key, (-1e6, 1e6))
    if not lo <= value <= hi:
        return f"{key}: {value!r} is outside [{lo:g}, {hi:g}]"
    return None


def validate_overrides(proxy: str, overrides: dict[str, Any], where: str) -> list[str]:
    problems = [p for k, v in overrides.items() if (p := check_override(proxy, k, v))]
    defaults = _field_defaults(proxy)
    dim, heads = overrides.get("dim", defaults.get("dim")), overrides.get("heads")
    heads = heads if heads is not None else defaults.get("heads")
    if not problems and isinstance(dim, int) and isinstance(heads, int) and dim % heads:
        problems.append(f"dim ({dim}) must be divisible by heads ({heads})")
    return [f"{where}: {p}" for p in problems]


def validate_options(proxy: str, options: dict[str, list[Any]]) -> list[str]:
    """Option-study axes: norm options by their own rules, the rest as overrides."""
    from normfree.workers.kinds.options import NORM_OPTIONS, OFF_WORDS

    problems: list[str] = []
    for key, values in options.items():
        for v in values:
            if key in NORM_OPTIONS:
                if key in ("affine", "learn_alpha") and not isinstance(v, bool):
                    problems.append(f"options.{key}: expected true or false, got {v!r}")
                elif key == "shift" and v not in ("none", "scalar", "channel"):
                    problems.append("options.shift: choose from none, scalar, channel")
                elif key == "alpha0":
                    lo, hi = _NORM_OPTION_RANGES["alpha0"]
                    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
                        problems.append(f"options.alpha0: a number in [{lo:g}, {hi:g}]")
            else:
                if key == "layerscale_init" and (v is False or str(v).lower() in OFF_WORDS):
                    continue  # the options kind reads these spellings as 0.0 (off)
                if p := check_override(proxy, key, v):
                    problems.append(f"options.{p}")
    return problems


# ------------------------------------------------------------------------------------ cost


def _flops_per_sample(cfg: Any, task: str) -> float:
    """Forward multiply-adds of one sample: attention + MLP per block and token, roughly."""
    rows = max(1, cfg.img_size // max(1, min(cfg.patch, cfg.img_size)))
    cols = max(1, (cfg.img_width or cfg.img_size) // max(1, cfg.patch))
    tokens = rows * cols
    d, depth = cfg.dim, cfg.depth
    per_block = tokens * (4 * d * d + 2 * cfg.mlp_ratio * d * d) + 2 * tokens * tokens * d
    if task == "diffusion":
        per_block += 6 * d * d  # adaLN modulation
    return depth * per_block


def trial_seconds(config: TrialConfig) -> float:
    """Estimated seconds of one trial on one core: epochs x the preset's measured seconds per
    epoch x the work factor of the trial's model against the measured one (FLOPs per sample)
    and of its training-set size, plus its FD samples."""
    from normfree.workers.proxies import PROXIES

    preset = PROXIES[config.proxy]
    epochs = config.epochs if config.epochs is not None else preset.epochs
    measured = preset.epoch_cost.config
    model_upd = {k: v for k, v in config.overrides.items() if hasattr(preset.config, k)}
    try:
        cfg = dataclasses.replace(preset.config, **model_upd)
        factor = _flops_per_sample(cfg, preset.task) / _flops_per_sample(measured, preset.task)
    except (TypeError, ValueError, ZeroDivisionError):
        factor = 1.0
    max_train = config.overrides.get("max_train", preset.max_train)
    if preset.max_train and isinstance(max_train, int | float) and max_train > 0:
        factor *= max(1.0, float(max_train) / preset.max_train)
    fd = config.overrides.get("fd_samples", preset.fd_samples) or 0
    fd_s = float(fd) / 100.0 * factor if isinstance(fd, int | float) else 0.0
    return epochs * preset.epoch_cost.seconds * factor + fd_s


class StudyEstimate(BaseModel):
    """What a study will buy: its trials and their estimated seconds on one core."""

    model_config = ConfigDict(frozen=True)

    trials: int
    trial_seconds: float  # estimated total, one core per trial, planning_seconds included
    per_trial_seconds: float  # the most expensive trial's estimate
    budget_seconds: float  # NORMFREE_MAX_STUDY_TRIAL_SECONDS at creation
    planning_seconds: float = 0.0  # outside trials, at most (generate: proposals, prescreens)

    def summary(self) -> str:
        hours = self.trial_seconds / 3600
        planning = (
            f", {self.planning_seconds:,.0f} of them proposing and prescreening"
            if self.planning_seconds
            else ""
        )
        return (
            f"{self.trials} trials, ~{self.trial_seconds:,.0f} trial-seconds{planning} "
            f"({hours:.1f} trial-hours; budget {self.budget_seconds:,.0f})"
        )


def _planned_configs(spec: StudySpec) -> list[TrialConfig]:
    """The trials a study will run (searches and generate studies: their budgets' worth), as
    its kind counts them (``StudyKind.budget``)."""
    from normfree.workers import kinds

    return kinds.get(spec.kind).budget(spec)


def estimate(spec: StudySpec, settings: Settings | None = None) -> StudyEstimate:
    settings = settings or get_settings()
    from normfree.workers import kinds

    configs = _planned_configs(spec)
    costs = [trial_seconds(c) for c in configs] or [0.0]
    planning = kinds.get(spec.kind).planning_seconds(spec)
    return StudyEstimate(
        trials=len(configs),
        trial_seconds=round(sum(costs) + planning, 1),
        per_trial_seconds=round(max(costs), 2),
        budget_seconds=settings.max_study_trial_seconds,
        planning_seconds=round(planning, 1),
    )


def check_study(spec: StudySpec, settings: Settings | None = None) -> StudyEstimate:
    """Validate a study's params, overrides, options and dataset, then its cost; ConfigError
    with every reason when anything is wrong. Returns the estimate of an acceptable study."""
    from normfree.workers.proxies import PROXIES

    settings = settings or get_settings()
    if spec.proxy not in PROXIES:
        raise ConfigError(f"proxy: unknown {spec.proxy!r}; choose from {sorted(PROXIES)}")
    params, problems = validate_params(spec, settings)
    if params is not None:
        problems += validate_overrides(spec.proxy, params.overrides, "params.overrides")
    problems += validate_options(spec.proxy, spec.options)
    if any(b not in BASELINES for b in spec.baselines):
        problems.append(f"baselines: choose from {list(BASELINES)}")
    if problems:
        raise ConfigError("; ".join(problems))
    est = estimate(spec, settings)
    if est.trial_seconds > settings.max_study_trial_seconds:
        raise ConfigError(
            f"the study is estimated at {est.summary()}: over the server's budget of "
            f"{settings.max_study_trial_seconds:,.0f} trial-seconds "
            "(NORMFREE_MAX_STUDY_TRIAL_SECONDS); use fewer trials, epochs or a smaller model"
        )
    return est


__all__ = [
    "RANGES",
    "StudyEstimate",
    "StudyParams",
    "check_finite",
    "check_override",
    "check_study",
    "estimate",
    "trial_seconds",
    "validate_params",
]
