"""The contract every study kind fulfils (:class:`StudyKind`) and the parameters all share.

A kind decides what a request for it must contain (``problems``, ``validate``), the trials
known up front (``plan``, with its cells), how it reacts as trials finish (``refill`` when
nothing is left to lease, ``finish`` when everything has run), how Optuna chooses and prunes
(``sampler``, ``pruner``) and how its results read (``report``, ``report_lines``,
``figure_axis``). The driver, the API, the CLI and the pages ask the kind and never test
``spec.kind`` themselves, so a new kind is one module here plus its registration (see
docs/architecture.md); ``smoke_spec`` is the small study every kind must run end to end
(tests/workers/test_kind_contract.py).

``StudySpec`` stays the one stored and transmitted form of a study (its JSON is in every
database); a kind reads its typed parameters, defaults included, out of ``spec.params`` with
:meth:`StudyKind.params` (:func:`common_params` for the keys every kind shares).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from normfree.specs import Scalar, StudySpec, TrialConfig

if TYPE_CHECKING:
    import optuna

    from normfree.workers.driver import StudyDriver
    from normfree.workers.generate import ImportanceSource
    from normfree.workers.scheduling import PlannedTrial


# The largest seed a trial key, Optuna and every supported database store as an integer.
MAX_SEED = 2**31 - 1
MAX_EPOCHS = 1000


class CommonParams(BaseModel):
    """``StudySpec.params`` keys every kind reads (``workers.scheduling.base_config``), strictly
    typed and bounded: ``"affine": "no"`` is not a boolean, ``seed0: 1.5`` not an integer, and
    an lr of -1 or 1e308 or a seed that would not fit the database's integer are refused.

    Keys of other kinds pass through (``extra="allow"``); ``StudyParams`` types them all. Each
    default is stated here, once; None means "the preset's own" (lr, dataset ...) or "the
    study's" (``affine``: the norm's default), never a default written elsewhere.
    """

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    seed0: StrictInt = Field(default=0, ge=0, le=MAX_SEED)  # the first of the paired seeds
    dataset: str | None = Field(default=None, max_length=64)
    lr: float | None = Field(default=None, gt=0, le=10.0)
    weight_decay: float | None = Field(default=None, ge=0, le=10.0)
    warmup_epochs: float | None = Field(default=None, ge=0, le=MAX_EPOCHS)
    overrides: dict[str, Scalar] = Field(default_factory=dict, max_length=16)
    affine: StrictBool | None = None  # gamma/beta on every norm, baselines included
    sampler_seed: StrictInt = Field(default=0, ge=0, le=MAX_SEED)


class PruningParams(CommonParams):
    """Keys of the kinds whose trials a pruner may stop (``scheduling.epoch_pruner``)."""

    reduction_factor: StrictInt = Field(default=3, ge=2, le=100)  # successive halving/hyperband
    # epochs before any pruning verdict; None: a quarter of the budget (``epoch_pruner``)
    min_resource: StrictInt | None = Field(default=None, ge=1, le=MAX_EPOCHS)


def common_params(spec: StudySpec) -> CommonParams:
    """The keys every kind shares, typed, with their defaults (ValueError when one is wrong)."""
    return CommonParams.model_validate(spec.params)


def needs_functions(spec: StudySpec) -> list[str]:
    """The grid kinds' first requirement: something to put in their cells."""
    if spec.functions:
        return []
    return ["functions: a property or options study needs at least one function"]


class StudyKind(ABC):
    """One kind of study. Subclasses set ``name``, ``summary`` and ``Params``, give their
    ``smoke_spec`` and override what else they need."""

    name: ClassVar[str]
    # One line for people: the API schema's description of ``kind`` and the CLI's help.
    summary: ClassVar[str]
    Params: ClassVar[type[CommonParams]] = CommonParams
    # Grid kinds plan every trial at creation; the driver gives each an Optuna trial by enqueueing
    # it. Other kinds get their Optuna trial when they ask Optuna for the point (search).
    grid: ClassVar[bool] = False
    asks_optuna: ClassVar[bool] = False
    # Whether its trials report each epoch to a pruner (``spec.pruner`` then applies).
    prunes: ClassVar[bool] = False
    # Whether its trials come one after another, each chosen from the results before it: its
    # optimisation history means something (the API's and the pages' search view).
    searches: ClassVar[bool] = False

    # -- requests ----------------------------------------------------------------------------
    def param_names(self) -> set[str]:
        """The ``StudySpec.params`` keys this kind reads."""
        return set(self.Params.model_fields)

    def params(self, spec: StudySpec) -> CommonParams:
        """The typed parameters of ``spec`` (ValueError when a value has the wrong type)."""
        return self.Params.model_validate(spec.params)

    def problems(self, spec: StudySpec) -> list[str]:
        """What a request of this kind lacks, in the API's words (an empty list: nothing)."""
        return []

    def validate(self, spec: StudySpec) -> None:
        """Everything creating the study must refuse before anything is written (ValueError)."""
        found = self.problems(spec)
        if found:
            raise ValueError("; ".join(found))

    def trial_count(self, spec: StudySpec) -> int:
        """How many trials the study asks for, at most (the API's size limit): its cells
        (functions x values x option combinations) x seeds."""
        n = max(1, len(spec.functions)) * max(1, len(spec.values))
        for values in spec.options.values():
            n *= len(values)
        return n * spec.seeds

    def budget(self, spec: StudySpec) -> list[TrialConfig]:
        """The configs the study will train at most, for the cost estimate (``workers.cost``):
        a grid's own, else ``budget_trials`` copies of a typical trial."""
        if self.grid:
            return [p.config for p in self.plan(spec)]
        from normfree.workers.scheduling import base_config, norm_spec

        typical = TrialConfig(**base_config(spec), norm=norm_spec("erf", spec), seed=0)
        return [typical] * self.budget_trials(spec)

    def planning_seconds(self, spec: StudySpec) -> float:
        """CPU-seconds the kind may spend outside trials (generate: proposals and prescreens),
        at most: counted by the cost estimate beside the trials' seconds."""
        return 0.0

    def budget_trials(self, spec: StudySpec) -> int:
        """How many trials a kind that is not a grid runs at most."""
        return self.trial_count(spec)

    @abstractmethod
    def smoke_spec(self, proxy: str) -> StudySpec:
        """The smallest study of this kind that exercises it end to end on ``proxy`` (a smoke
        preset): what the kind contract test creates, plans, runs and ranks."""

    def cell_functions(self, spec: StudySpec) -> list[tuple[str, str]]:
        """(function named, text trained) for every cell the study plans, so a request's
        cells are checked before anything is written: the functions as given, by default."""
        return [(fn, fn) for fn in spec.functions]

    # -- planning and reacting ---------------------------------------------------------------
    def plan(self, spec: StudySpec) -> list[PlannedTrial]:
        """The trials known at creation (inserted with the study)."""
        return []

    def refill(self, driver: StudyDriver) -> bool:
        """Nothing is left to lease: add trials if the kind has more to run now (True: added)."""
        return False

    def finish(self, driver: StudyDriver) -> bool:
        """Every trial has run: add a last round if the kind wants one (True: added)."""
        return False

    # -- Optuna ------------------------------------------------------------------------------
    def sampler(self, spec: StudySpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
        from normfree.workers.scheduling import random_sampler

        return random_sampler(spec, seed)

    def pruner(self, spec: StudySpec) -> optuna.pruners.BasePruner:
        import optuna

        if not self.prunes:
            return optuna.pruners.NopPruner()  # grid studies never prune
        from normfree.workers.scheduling import epoch_pruner

        return epoch_pruner(spec)

    # -- results -----------------------------------------------------------------------------
    def report(
        self, store: Any, study_id: int, importance: ImportanceSource | None = None
    ) -> dict[str, Any] | None:
        """What the kind adds to a study's results beyond its leaderboard (None: nothing).
        ``importance``: where a kind that reports its study's property importance looks it up
        (``workers.generate.ImportanceSource``: the API's stored one, so a read never
        computes it); None: the kind finds it itself."""
        return None

    def report_lines(self, report: dict[str, Any]) -> list[str]:
        """:meth:`report` for people, one line each (the CLI prints them under the leaderboard)."""
        return []

    def figure_axis(self, spec: StudySpec) -> str | None:
        """The axis the study page plots its objective against, one curve per function (the
        transform of a property study); None: the cells side by side."""
        return None
