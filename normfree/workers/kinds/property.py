"""``property``: functions x a transform over values x paired seeds (a full grid).

Seeds are paired: seed ``i`` is the same integer in every cell and in the baselines, so two cells
compare seed by seed, which removes the between-seed variance from their difference.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import StrictBool

from normfree.specs import StudySpec
from normfree.workers.kinds.base import CommonParams, StudyKind, needs_functions
from normfree.workers.scheduling import (
    Cell,
    PlannedTrial,
    norm_spec,
    plan_cells,
    transform_call,
    untransformed_name,
)


class PropertyParams(CommonParams):
    # The function itself (or t(f) for a parameterless transform such as sign_flip) as a cell.
    untransformed_cell: StrictBool = False


class PropertyKind(StudyKind):
    name = "property"
    summary = "functions x transform values x seeds (a full grid)"
    Params: ClassVar[type[CommonParams]] = PropertyParams
    grid = True

    def params(self, spec: StudySpec) -> PropertyParams:
        return PropertyParams.model_validate(spec.params)

    def smoke_spec(self, proxy: str) -> StudySpec:
        return StudySpec(
            kind=self.name, proxy=proxy, seeds=1, functions=["erf"], transform="shift_h",
            values=[0.5], baselines=["layernorm"], epochs=1,
        )  # fmt: skip

    def problems(self, spec: StudySpec) -> list[str]:
        out = needs_functions(spec)
        if not spec.transform:
            out.append("transform: a property study needs a transform (e.g. shift_h)")
        if not spec.values and not self.params(spec).untransformed_cell:
            out.append(
                "values: a property study needs transform values (e.g. [-1, 0, 1]), or "
                'params {"untransformed_cell": true} for a parameterless transform (sign_flip)'
            )
        return out

    def validate(self, spec: StudySpec) -> None:
        if not spec.functions:
            raise ValueError("a property or options study needs at least one function")
        self.cells(spec)  # a transform and its values

    def cell_functions(self, spec: StudySpec) -> list[tuple[str, str]]:
        """The transform calls at each value (and the untransformed cell) of every function."""
        if not spec.transform:
            return super().cell_functions(spec)
        untransformed = self.params(spec).untransformed_cell
        out: list[tuple[str, str]] = []
        for fn in spec.functions:
            if untransformed:
                out.append((fn, untransformed_name(spec.transform, fn)))
            out += [(fn, transform_call(spec.transform, fn, v)) for v in spec.values]
        return out

    def cells(self, spec: StudySpec) -> list[Cell]:
        """Every function under the transform at every value (and, with
        ``untransformed_cell``, the function itself: the paper's "unclipped too" cell, or t(f)
        when the transform takes no parameter)."""
        untransformed = self.params(spec).untransformed_cell
        if not spec.transform or not (spec.values or untransformed):
            raise ValueError("a property study needs a transform and its values")
        cells: list[Cell] = []
        for fn in spec.functions:
            if untransformed:
                name = untransformed_name(spec.transform, fn)
                axes = {"function": fn, spec.transform: None}
                cells.append((norm_spec(name, spec), {}, axes, "cell"))
            for v in spec.values:
                norm = norm_spec(transform_call(spec.transform, fn, v), spec)
                cells.append((norm, {}, {"function": fn, spec.transform: float(v)}, "cell"))
        return cells

    def plan(self, spec: StudySpec) -> list[PlannedTrial]:
        self.validate(spec)
        return plan_cells(spec, self.cells(spec), [{}])  # one model: the preset's

    def figure_axis(self, spec: StudySpec) -> str | None:
        return spec.transform
