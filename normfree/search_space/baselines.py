"""The baselines: reference norms that are modules, not pointwise formulas. One table.

``specs.BASELINES`` (the names, for NormSpec), the catalog's listings, the kernels' resolver and
the leaderboards' "baseline" group all read this tuple; it imports nothing heavy, so the
cross-layer types can use it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Baseline:
    """A reference entry that is not a pointwise formula (the kernels layer builds the module)."""

    name: str
    group: str
    citation: str
    description: str

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "kind": "baseline"}


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        "layernorm",
        "baseline",
        "Ba, Kiros, Hinton: Layer Normalization (2016)",
        "per-token mean/variance normalisation with affine gamma, beta",
    ),
    Baseline(
        "rmsnorm",
        "baseline",
        "Zhang, Sennrich: Root Mean Square Layer Normalization (2019)",
        "per-token RMS normalisation with gain",
    ),
    Baseline("identity", "baseline", "-", "no normalisation at all"),
)

NAMES: tuple[str, ...] = tuple(b.name for b in BASELINES)
