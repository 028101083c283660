"""``generate``: new functions evolved from the expression grammar (``workers.generate``).

Its generations are planned by the driver as results arrive: a generation's parents need their
results, so the next one is planned only once nothing of the study is in flight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from normfree.specs import StudySpec
from normfree.workers.kinds.base import CommonParams, PruningParams, StudyKind

if TYPE_CHECKING:
    from normfree.workers.driver import StudyDriver


class GenerateKindParams(PruningParams):
    """The common keys plus every option of the evolution (``evolution.GenerateOptions``)."""

    alpha0: float | None = Field(default=None, gt=0, le=100.0)  # fixed for every discovered one


def _options_fields() -> set[str]:
    from normfree.workers.evolution import GenerateOptions

    return set(GenerateOptions.model_fields)


class GenerateKind(StudyKind):
    name = "generate"
    Params: ClassVar[type[CommonParams]] = GenerateKindParams
    prunes = True

    def param_names(self) -> set[str]:
        return set(self.Params.model_fields) | _options_fields()

    def problems(self, spec: StudySpec) -> list[str]:
        if spec.transform or spec.values or spec.options:
            return [
                "kind: a generate study takes no transform, values or options "
                "(they belong to property and options studies)"
            ]
        return []

    def validate(self, spec: StudySpec) -> None:
        from normfree.workers.evolution import validate_spec

        validate_spec(spec)

    def trial_count(self, spec: StudySpec) -> int:
        from normfree.workers.evolution import generate_options

        opts = generate_options(spec)
        return (opts.population + opts.generations * opts.n_children(1)) * spec.seeds

    def planning_seconds(self, spec: StudySpec) -> float:
        """Every generation's proposals and prescreens at their most (``run_generation`` stops
        a generation at its share): generation 0 proposes only without ``functions``."""
        from normfree.workers.evolution import generate_options

        opts = generate_options(spec)
        first = 1 if spec.functions else 0
        return sum(opts.planning_seconds(g) for g in range(first, opts.generations + 1))

    def refill(self, driver: StudyDriver) -> bool:
        """Plan the next generation once nothing of the study is in flight."""
        if driver.in_flight:
            return False
        if driver.generator is None:
            from normfree.workers.generate import GenerativePlanner

            driver.generator = GenerativePlanner(
                driver.spec, driver.study_id, driver.store, driver.optuna
            )
        return driver.generator.next_generation() > 0

    def report(self, store: Any, study_id: int) -> dict[str, Any] | None:
        from normfree.workers.generate import study_report

        return study_report(store, study_id)
