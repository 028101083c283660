"""``options``: functions x every combination of option values x paired seeds.

Options that belong to the norm (``alpha0``, ``shift``, ``affine``, ``learn_alpha``) go into the
``NormSpec``; every other option overrides the proxy's config (LayerScale, depth-scaled init...),
and the baselines run beside every such combination.
"""

from __future__ import annotations

import itertools

from normfree.specs import Scalar, StudySpec
from normfree.workers.kinds.base import StudyKind, needs_functions
from normfree.workers.scheduling import Cell, PlannedTrial, norm_spec, plan_cells

# Options that configure the norm itself (NormSpec fields); all others override the proxy config.
NORM_OPTIONS = ("shift", "alpha0", "affine", "learn_alpha")
# How people spell "no LayerScale" on the command line; the proxies read 0.0 as off.
OFF_WORDS = ("off", "none", "no", "false")


def _option_value(name: str, value: Scalar) -> Scalar:
    if name == "layerscale_init" and (
        value is False or (isinstance(value, str) and value.lower() in OFF_WORDS)
    ):
        return 0.0
    return value


def option_combinations(options: dict[str, list[Scalar]]) -> list[dict[str, Scalar]]:
    """The cross product of option values, in a stable order (option names sorted)."""
    names = sorted(options)
    if not names:
        return [{}]
    return [
        {n: _option_value(n, v) for n, v in zip(names, combo, strict=True)}
        for combo in itertools.product(*(options[n] for n in names))
    ]


def _model_part(combo: dict[str, Scalar]) -> dict[str, Scalar]:
    """The options of a combination that override the proxy (not the norm's)."""
    return {k: v for k, v in combo.items() if k not in NORM_OPTIONS}


class OptionsKind(StudyKind):
    name = "options"
    summary = "functions x option values x seeds (norm options and proxy-config overrides)"
    grid = True

    def smoke_spec(self, proxy: str) -> StudySpec:
        return StudySpec(
            kind=self.name, proxy=proxy, seeds=1, functions=["erf"],
            options={"alpha0": [0.5, 1.0]}, baselines=["layernorm"], epochs=1,
        )  # fmt: skip

    def problems(self, spec: StudySpec) -> list[str]:
        out = needs_functions(spec)
        if not spec.options:
            out.append("options: an options study needs at least one option with values")
        return out

    def validate(self, spec: StudySpec) -> None:
        if not spec.functions:
            raise ValueError("a property or options study needs at least one function")

    def cells(self, spec: StudySpec) -> list[Cell]:
        """Every function at every combination of option values."""
        cells: list[Cell] = []
        for fn in spec.functions:
            for combo in option_combinations(spec.options):
                norm_opts = {k: v for k, v in combo.items() if k in NORM_OPTIONS}
                norm = norm_spec(fn, spec, **norm_opts)
                cells.append((norm, _model_part(combo), {"function": fn, **combo}, "cell"))
        return cells

    def plan(self, spec: StudySpec) -> list[PlannedTrial]:
        self.validate(spec)
        models = [_model_part(c) for c in option_combinations(spec.options)]
        return plan_cells(spec, self.cells(spec), models)
