"""The small, frozen, JSON-serialisable types that cross layers.

``Candidate`` (built only by ``search_space``) is the other one; everything that travels between
the scheduler, a Ray worker, storage and the API is defined here, once. These models hold data
only: no database handles, no tensors, no globals, so a ``TrialConfig`` can be hashed, shipped to
a worker process and stored, and a ``TrialResult`` can come back the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from normfree.search_space import baselines

Scalar = bool | int | float | str

# ------------------------------------------------------------------------ statuses (one home)
# A study's status; ``workers.lifecycle`` holds the transitions people ask for.
# "creating": written first while the engine plans the study (its Optuna study, its trials);
# a study left there by a crash is removed at the next start (workers.driver.recover_creations).
StudyStatus = Literal["creating", "pending", "running", "paused", "cancelled", "complete", "failed"]
# a study in one of these may still change: pages watch it live
LIVE_STATUSES: frozenset[str] = frozenset({"pending", "running", "paused"})
STUDY_STATUSES: tuple[StudyStatus, ...] = get_args(StudyStatus)
# A trial row's status in storage (upper case: a TrialResult's own status is lower case).
TrialRowStatus = Literal[
    "WAITING", "RUNNING", "COMPLETE", "DIVERGED", "PRUNED", "FAILED", "CANCELLED"
]  # fmt: skip
TRIAL_STATUSES: tuple[TrialRowStatus, ...] = get_args(TrialRowStatus)
# Nothing writes to such a row again (and Optuna must have been told of it).
TERMINAL_TRIAL_STATUSES: tuple[TrialRowStatus, ...] = (
    "COMPLETE",
    "DIVERGED",
    "PRUNED",
    "FAILED",
    "CANCELLED",
)
# A run ended it (an outcome a board counts); CANCELLED rows never ran.
RUN_OUTCOME_STATUSES: tuple[TrialRowStatus, ...] = ("COMPLETE", "DIVERGED", "FAILED", "PRUNED")
# Trained to its last epoch or to its failure to train: what fidelity compares with the papers.
TRAINED_STATUSES: tuple[TrialRowStatus, ...] = ("COMPLETE", "DIVERGED")

BASELINES = baselines.NAMES  # layernorm, rmsnorm, identity: defined with their citations there

# The papers' names for operator configurations, not only functions (one map, read by the
# trainer's norm resolution and by reference cells): Derf = erf(alpha x + s), DyT = tanh(alpha x).
NORM_ALIASES: dict[str, dict[str, Any]] = {
    "derf": {"name": "erf", "shift": "scalar"},
    "dyt": {"name": "tanh", "shift": "none"},
    "ln": {"name": "layernorm"},
    "rms": {"name": "rmsnorm"},
    "none": {"name": "identity"},
}


# Names a user candidate may not take: training (``kernels.create_norm``, ``parse_norm``) and
# reference cells read these as the operators above whatever is stored under them, and they read
# them case-insensitively, so they are compared lower-cased (:func:`is_reserved_name`).
RESERVED_NAMES: frozenset[str] = frozenset(BASELINES) | frozenset(NORM_ALIASES)


def is_reserved_name(name: str) -> bool:
    """Whether ``name`` means a baseline or a paper alias to the readers of names."""
    return name.strip().lower() in RESERVED_NAMES


def operator_label(function: str, shift: str = "none", alpha: float | None = None) -> str:
    """How every view names a function under an operator (leaderboard arms and reference cells
    alike): ``erf`` (y = gamma f(alpha x) + beta), ``erf + s`` (with the learnable scalar s:
    the published search's operator), ``erf + s[D]`` (a per-channel s), ``tanh (alpha fixed
    at 1)``. A label without ``+ s`` ran without s."""
    out = function
    if shift == "scalar":
        out += " + s"
    elif shift == "channel":
        out += " + s[D]"
    if alpha is not None:
        out += f" (alpha fixed at {alpha:g})"
    return out


# The kinds that ask "how do these functions rank?" (a property study asks what a property
# does, and runs without s, as the paper's ablations did: science.md section 3).
_RANKING_KINDS = ("options", "search")


def published_shift(kind: str, functions: list[str], options: dict[str, Any]) -> str:
    """The operator's shift a study gets when it names none: ``scalar`` where it asks about the
    16 search candidates as the paper's search did (an options or search study naming all 16,
    with no ``shift`` option of its own), else ``none``. The paper trained every candidate of
    its search as gamma f(alpha x + s) + beta (science.md section 2)."""
    if kind not in _RANKING_KINDS or "shift" in options or len(functions) < 16:
        return "none"
    from normfree.search_space.catalog import SEARCH16  # sympy: only for a study of 16+

    return "scalar" if set(SEARCH16) <= set(functions) else "none"


def expand_alias(name: str, shift: str = "none", formula: str | None = None) -> tuple[str, str]:
    """(function name, shift) behind a paper alias; other names unchanged. The alias's shift
    applies unless one was set (``derf`` is erf with a scalar shift, ``derf`` + per-channel is
    erf per-channel). A formula is never an alias, whatever its name."""
    alias = NORM_ALIASES.get(name.lower()) if formula is None else None
    if alias is None:
        return name, shift
    return alias["name"], alias.get("shift", shift) if shift == "none" else shift


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def stable_json(self) -> str:
        """JSON with sorted keys: equal models give equal text on every machine."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def stable_hash(self) -> str:
        return hashlib.sha256(self.stable_json().encode()).hexdigest()[:16]


class NormSpec(_Frozen):
    """What goes into every norm slot of a proxy.

    ``name`` is a baseline (``layernorm``, ``rmsnorm``, ``identity``), a catalog name (``erf``), a
    transform call (``shift_h(erf, 0.5)``), a formula or a stored user candidate's name (nested
    in transforms too). ``formula`` is set when ``name`` alone needs a database: a user formula,
    or the definition of a text naming stored candidates (each replaced by its formula,
    ``shift_h(1.5*u/(1+abs(u)), 0.5)``); ``search_space.resolver`` builds it, named ``name``.
    """

    name: str
    formula: str | None = None
    # s: absent (DyT and the property ablations), one scalar per layer (Derf), or per channel.
    shift: Literal["none", "scalar", "channel"] = "none"
    # gamma/beta per channel; DiT's norms have none (adaLN modulates instead).
    affine: bool = True
    # alpha's initial value (science.md section 1: 0.5).
    alpha0: float = 0.5
    # False: alpha stays at alpha0 (the DyT paper's "without alpha" ablation, with alpha0 = 1).
    learn_alpha: bool = True

    @model_serializer(mode="wrap")
    def _omit_new_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Trial and arm keys hash this model's JSON: a field added later is left out at its
        # default, so every config stored before it existed keeps its key.
        data = handler(self)
        if data.get("learn_alpha") is True:
            data.pop("learn_alpha")
        return data

    @property
    def is_baseline(self) -> bool:
        return self.name in BASELINES and self.formula is None


def resolve_alias(spec: NormSpec) -> NormSpec:
    """The NormSpec with a paper alias replaced by its operator (see :func:`expand_alias`)."""
    name, shift = expand_alias(spec.name, spec.shift, spec.formula)
    if name == spec.name:
        return spec
    return spec.model_copy(update={"name": name, "shift": shift})


class TrialConfig(_Frozen):
    """Everything that determines one training run. Its hash is the trial key."""

    proxy: str
    norm: NormSpec
    seed: int = 0
    # Proxy-config field overrides (depth, width, layerscale_init, ...), by field name.
    overrides: dict[str, Scalar] = Field(default_factory=dict)
    dataset: str | None = None  # None: the preset's default
    epochs: int | None = None  # None: the preset's budget
    lr: float | None = None
    weight_decay: float | None = None
    warmup_epochs: float | None = None

    def key(self) -> str:
        """Stable identity of the run: the same config is never trained twice in one study."""
        return self.stable_hash()


# TrialConfig's training settings an arm's label shows when a study sets them (None: the
# preset's own). Not ``epochs``: smoke runs set a budget on every arm of a board, where it would
# stand on every row; arms that differ only by their budget still read alike (a known gap).
TRAINING_FIELDS = ("dataset", "lr", "weight_decay", "warmup_epochs")


def arm_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial's config (as stored) changes from its proxy's preset, as an arm shows it:
    its overrides and the training settings of :data:`TRAINING_FIELDS` that are set. Why: two
    arms of one function that differ only by a study's ``lr`` (one trained, one diverged) read
    alike on every board."""
    raw = config.get("overrides") or {}
    if not isinstance(raw, Mapping):
        return raw  # type: ignore[no-any-return]  # unreadable: the caller's check says so
    out = dict(raw)
    out.update({k: config[k] for k in TRAINING_FIELDS if config.get(k) is not None})
    return out


class EpochRecord(_Frozen):
    """One row of a learning curve."""

    epoch: int
    step: int
    train_loss: float
    val_loss: float | None = None
    # Proxy-specific validation metrics, e.g. {"val_acc": 0.93} or {"val_fd": 12.1}.
    metrics: dict[str, float] = Field(default_factory=dict)
    lr: float
    wall_time_s: float


class LayerDiagnostic(_Frozen):
    """Per norm slot and epoch: what the operator's parameters and activations did."""

    epoch: int
    layer: str  # e.g. "blocks.3.norm1", "norm_final"
    alpha: float | None = None
    s_mean: float | None = None
    gamma_mean: float | None = None
    gamma_std: float | None = None
    beta_mean: float | None = None
    beta_std: float | None = None
    # the trial page plots alpha against 1 / input_std
    input_std: float | None = Field(default=None, description="std of the norm's input")
    input_absmax: float | None = None
    # the residual branch is the one whose output this slot feeds
    branch_norm: float | None = Field(default=None, description="RMS of the residual branch")
    grad_norm: float | None = None
    extra: dict[str, float] = Field(default_factory=dict)


TrialStatus = Literal["complete", "diverged", "pruned", "failed"]


class TrialResult(_Frozen):
    """What a trial produced. A divergence is a result (``status='diverged'``), not an error."""

    status: TrialStatus
    # Final metrics, e.g. {"val_acc": .., "test_acc": .., "val_loss": ..}; the proxy names its
    # primary metric and direction in ``objective`` / ``direction``.
    metrics: dict[str, float] = Field(default_factory=dict)
    objective: str | None = None
    direction: Literal["maximize", "minimize"] = "maximize"
    curves: list[EpochRecord] = Field(default_factory=list)
    diagnostics: list[LayerDiagnostic] = Field(default_factory=list)
    eval_train_loss: float | None = None  # train-set loss in eval mode, after training
    diverged_at_step: int | None = None
    # First step whose loss spiked (non-finite or > 2x its running EMA); None if it never did.
    # Per-slot activation maxima over training are in the diagnostics' ``extra`` (train_*).
    spike_step: int | None = None
    # Why a diverged trial failed to train ("loss not finite", "loss 4.2x its first value",
    # "ended near chance: val_acc 0.11"); None otherwise.
    failure: str | None = None
    train_time_s: float = 0.0
    total_time_s: float = 0.0
    attempt: int = 1
    worker: str | None = None
    error: str | None = None
    # The concrete settings trained (preset + overrides resolved, e.g. DiT's zero_init_final).
    config: dict[str, Any] = Field(default_factory=dict)
    # The trainer's code version (``workers.trainer.trainer_version``): with the trial key it
    # decides whether a later study may reuse this result instead of training it again.
    code_version: str | None = None

    @property
    def value(self) -> float | None:
        """The objective's final value, or None when the trial did not complete."""
        if self.objective is None:
            return None
        return self.metrics.get(self.objective)


def _registered_kind(name: str) -> str:
    """A study kind's name is one the registry knows (``workers.kinds``, imported on first use:
    it imports this module)."""
    from normfree.workers import kinds

    kinds.get(name)  # ValueError naming the known kinds
    return name


# The name of a registered study kind: the registry is the one list of kinds.
StudyKindName = Annotated[str, AfterValidator(_registered_kind)]


class StudySpec(_Frozen):
    """A study: which trials to run and how to choose them.

    ``kind`` names a registered study kind (``workers.kinds``), which decides what the other
    fields mean and reads its typed parameters out of ``params``.
    """

    kind: StudyKindName
    name: str | None = None
    proxy: str
    seeds: int = 3
    functions: list[str] = Field(default_factory=list)
    transform: str | None = None
    values: list[float] = Field(default_factory=list)
    options: dict[str, list[Scalar]] = Field(default_factory=dict)
    # Not given (or None): ``published_shift`` decides (scalar for a ranking of the 16, as the
    # paper's search ran them; none otherwise). A stored spec always holds its value.
    norm_shift: Literal["none", "scalar", "channel"] = "none"
    baselines: list[str] = Field(default_factory=list)
    epochs: int | None = None
    sampler: Literal["grid", "tpe", "random"] = "grid"
    pruner: Literal["none", "sha", "hyperband", "median"] = "none"
    n_trials: int | None = None
    extra_seeds_for_top: int = 0
    params: dict[str, Any] = Field(default_factory=dict)
    # Stored user candidates the study names, baked at creation (name -> formula text) by
    # ``workers.validation``: every trial's NormSpec carries its function's definition, so a
    # worker builds it with no database (``search_space.resolver``).
    definitions: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_operator(cls, data: Any) -> Any:
        """A spec that names no shift gets the published operator's (``published_shift``)."""
        if isinstance(data, dict) and data.get("norm_shift") is None:
            data = {**data}
            data["norm_shift"] = published_shift(
                str(data.get("kind", "")),
                [str(f) for f in data.get("functions") or []],
                dict(data.get("options") or {}),
            )
        return data
