"""``property``: functions x a transform over values x paired seeds (a full grid).

Seeds are paired: seed ``i`` is the same integer in every cell and in the baselines, so two cells
compare seed by seed, which removes the between-seed variance from their difference.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import StrictBool

from normfree.specs import StudySpec
from normfree.workers.kinds.base import CommonParams, StudyKind, needs_functions
from normfree.workers.scheduling import PlannedTrial, plan_cells, property_cells


class PropertyParams(CommonParams):
    # The function itself (or t(f) for a parameterless transform such as sign_flip) as a cell.
    untransformed_cell: StrictBool | None = None


class PropertyKind(StudyKind):
    name = "property"
    Params: ClassVar[type[CommonParams]] = PropertyParams
    grid = True

    def problems(self, spec: StudySpec) -> list[str]:
        out = needs_functions(spec)
        if not spec.transform:
            out.append("transform: a property study needs a transform (e.g. shift_h)")
        if not spec.values and not spec.params.get("untransformed_cell"):
            out.append(
                "values: a property study needs transform values (e.g. [-1, 0, 1]), or "
                'params {"untransformed_cell": true} for a parameterless transform (sign_flip)'
            )
        return out

    def validate(self, spec: StudySpec) -> None:
        if not spec.functions:
            raise ValueError("a property or options study needs at least one function")
        property_cells(spec)  # a transform and its values

    def plan(self, spec: StudySpec) -> list[PlannedTrial]:
        self.validate(spec)
        return plan_cells(spec, *property_cells(spec))
