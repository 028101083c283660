"""``options``: functions x every combination of option values x paired seeds.

Options that belong to the norm (``alpha0``, ``shift``, ``affine``, ``learn_alpha``) go into the
``NormSpec``; every other option overrides the proxy's config (LayerScale, depth-scaled init...),
and the baselines run beside every such combination.
"""

from __future__ import annotations

from normfree.specs import StudySpec
from normfree.workers.kinds.base import StudyKind, needs_functions
from normfree.workers.scheduling import PlannedTrial, option_cells, plan_cells


class OptionsKind(StudyKind):
    name = "options"
    grid = True

    def problems(self, spec: StudySpec) -> list[str]:
        out = needs_functions(spec)
        if not spec.options:
            out.append("options: an options study needs at least one option with values")
        return out

    def validate(self, spec: StudySpec) -> None:
        if not spec.functions:
            raise ValueError("a property or options study needs at least one function")

    def plan(self, spec: StudySpec) -> list[PlannedTrial]:
        self.validate(spec)
        return plan_cells(spec, *option_cells(spec))
