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
    from normfree.workers.generate import ImportanceSource


class GenerateKindParams(PruningParams):
    """The common keys plus every option of the evolution (``evolution.GenerateOptions``)."""

    alpha0: float | None = Field(default=None, gt=0, le=100.0)  # fixed for every discovered one


def _options_fields() -> set[str]:
    from normfree.workers.evolution import GenerateOptions

    return set(GenerateOptions.model_fields)


_STOPS = ("invalid", "duplicate", "constraint", "prescreen", "ranked_out", "train", "seed")


class GenerateKind(StudyKind):
    name = "generate"
    summary = (
        "new functions evolved from the expression grammar (params: generations, population, "
        "children, constraints, ...)"
    )
    Params: ClassVar[type[CommonParams]] = GenerateKindParams
    prunes = True
    searches = True

    def smoke_spec(self, proxy: str) -> StudySpec:
        params = {
            "generations": 1, "population": 2, "children": 1, "max_proposals": 20,
            "prescreen": False,
        }  # fmt: skip
        return StudySpec(
            kind=self.name, proxy=proxy, seeds=1, baselines=["layernorm"], epochs=1, params=params
        )

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
        trained = opts.population + opts.generations * opts.n_children(1)
        return (trained + len(spec.baselines)) * spec.seeds  # the baselines run beside them

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

    def report(
        self, store: Any, study_id: int, importance: ImportanceSource | None = None
    ) -> dict[str, Any] | None:
        from normfree.workers.generate import study_report

        return study_report(store, study_id, importance)

    def report_lines(self, report: dict[str, Any]) -> list[str]:
        """Each generation's proposals and where they stopped, then the property importance."""
        head = ("gen", "proposed", *_STOPS)
        rows = [head] + [
            (
                str(g["generation"]),
                str(g["proposed"]),
                *(str(g["counts"].get(c, 0)) for c in _STOPS),
            )
            for g in report["generations"]
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        out = ["generations: proposals and where they stopped"]
        out += ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        if (frac := report.get("fraction_rejected")) is not None:
            saved = report.get("trial_s_avoided")
            avoided = f", ~{saved:.0f} trial-seconds avoided" if saved else ""
            out.append(f"rejected before training: {100 * frac:.0f}% of proposals{avoided}")
        imp = report.get("importance") or {}
        features = [f for f in imp.get("features", []) if not f.get("constant")]
        if features:
            out.append(f"property importance ({imp['method']}, n={imp['n_candidates']}):")
            for f in features:
                ci = (
                    f"[{f['ci_low']:+.2f}, {f['ci_high']:+.2f}]" if f["ci_low"] is not None else "-"
                )
                out.append(f"  {f['name']}: rho {f['rho']:+.2f} {ci}")
        elif imp.get("note"):
            out.append(f"property importance: {imp['note']}")
        return out
