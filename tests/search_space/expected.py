"""Expected properties (science.md section 4) of catalog functions and transform calls, written
from the mathematics, not read back from the implementation: the one table of them, keyed by
name. It is not the catalog: a new entry needs no row here (every entry's properties are computed
and sanity-checked whether or not the table knows it). ``slope0`` is the kernel-safe derivative
at 0: the true slope at a sign-based kink (naive autograd through sign(u)*g(|u|) gives 0), and
the central secant with h = 1e-3 where the slope is infinite (documented convention).
"""

from __future__ import annotations

import math

import pytest

SQ = 2 / math.sqrt(math.pi)  # erf'(0)
INF_SLOPE_SECANT = (1 - math.exp(-math.sqrt(1e-3))) / 1e-3  # exproot at 0 (documented)
P23_SECANT = 1e-3 ** (2 / 3) / 1e-3  # power23 at 0
E1 = math.e - 1  # where sign(u)*log(|u|+1) reaches 1
LQ = math.sqrt(math.e - 1)  # where sign(u)*log(u^2+1) reaches 1
AS = math.sinh(1)  # where asinh reaches 1

B = dict(bounded=True, growth="bounded", range_min=-1.0, range_max=1.0)
ODD = dict(f0=0.0, zero_centred=True, odd=True)
INC = dict(monotone="increasing", turning_points=())
SMOOTH = dict(continuous=True, differentiable=True, non_differentiable_at=())


def kinks(*pts):
    return dict(continuous=True, differentiable=False, non_differentiable_at=pts)


# name or transform call -> expected property values (only the listed keys are checked)
PROPERTIES: dict[str, dict] = {
    # the 16
    "erf": {**ODD, **B, **INC, **SMOOTH, "slope0": SQ, "limit_pos": 1.0, "limit_neg": -1.0},
    "tanh": {**ODD, **B, **INC, **SMOOTH, "slope0": 1.0, "limit_pos": 1.0},
    "arctan": {**ODD, **B, **INC, **SMOOTH, "slope0": 2 / math.pi, "limit_pos": 1.0},
    # sin has slope cos(pi/2) = 0 where the clamp starts: C1, no kink
    "satursin": {**ODD, **B, **INC, **SMOOTH, "slope0": 1.0},
    "expsign": {**ODD, **B, **INC, **SMOOTH, "slope0": 1.0},
    # slope 1/(2 sqrt|u|) at 0: its square is not integrable (heavy-tailed gradients)
    "exproot": {
        **ODD, **B, **INC, **kinks(0.0), "slope0": INF_SLOPE_SECANT,
        "heavy_tailed_slope": True, "heavy_tailed_at": (0.0,),
    },
    "relsign": {**ODD, **B, **INC, **SMOOTH, "slope0": 0.5},
    "isru": {**ODD, **B, **INC, **SMOOTH, "slope0": 1.0},
    "cubsign": {**ODD, **B, **INC, **SMOOTH, "slope0": 0.0, "flat_halfwidth": 0.0},
    "logsignclip": {**ODD, **B, **INC, **kinks(-E1, E1), "slope0": 1.0},
    "logquadclip": {**ODD, **B, **INC, **kinks(-LQ, LQ), "slope0": 0.0},
    "arcsinhclip": {**ODD, **B, **INC, **kinks(-AS, AS), "slope0": 1.0},
    # slope ~|u|^(-1/3) at 0: infinite, but its square is integrable
    "power23clip": {
        **ODD, **B, **INC, **kinks(-1.0, 0.0, 1.0), "slope0": P23_SECANT,
        "heavy_tailed_slope": False,
    },
    "linearclip": {**ODD, **B, **INC, **kinks(-1.0, 1.0), "slope0": 1.0},
    "smoothsign": {**ODD, **B, **INC, **SMOOTH, "slope0": 1.0, "limit_pos": 1.0},
    # saturlog converges like 1 - 1/log(u): bounded, limit 1 (confirmed symbolically)
    "saturlog": {**ODD, **B, **INC, **SMOOTH, "slope0": 1.0, "limit_pos": 1.0, "limit_neg": -1.0},
    # growth family
    "linear": {**ODD, **INC, **SMOOTH, "bounded": False, "growth": "linear", "range_max": None},
    "power23": {
        **ODD, **INC, **kinks(0.0), "bounded": False, "growth": "sub-linear power",
        "growth_exponent": pytest.approx(2 / 3, abs=1e-3), "slope0": P23_SECANT,
    },
    "logsign": {**ODD, **INC, **SMOOTH, "bounded": False, "growth": "logarithmic", "slope0": 1.0},
    "logquad": {**ODD, **INC, **SMOOTH, "bounded": False, "growth": "logarithmic", "slope0": 0.0},
    "asinh": {**ODD, **INC, **SMOOTH, "bounded": False, "growth": "logarithmic", "slope0": 1.0},
    # non-monotonic family (each peaks near 1)
    "sin": {**ODD, **SMOOTH, "bounded": True, "monotone": "neither", "limit_pos": None},
    "dampx": {
        **ODD, **SMOOTH, **B, "monotone": "neither", "turning_points": (-1.0, 1.0),
        "slope0": 2.0, "limit_pos": 0.0,
    },
    "dampexp": {
        **ODD, "bounded": True, "monotone": "neither", "turning_points": (-1.0, 1.0),
        "slope0": 2.72, "range_max": pytest.approx(2.72 / math.e, rel=1e-6),
    },
    # transform families
    "shift_h(erf, 0.5)": {
        "f0": math.erf(0.5), "zero_centred": False, "odd": False, **B, **INC, **SMOOTH,
        "slope0": SQ * math.exp(-0.25),
    },
    "shift_h(expsign, -1)": {
        "f0": -(1 - math.exp(-1)), "zero_centred": False, "odd": False, "slope0": math.exp(-1),
        **SMOOTH,
    },
    "shift_v(tanh, 0.5)": {
        "f0": 0.5, "zero_centred": False, "odd": False, "bounded": True, "range_min": -0.5,
        "range_max": 1.5, "limit_neg": -0.5, "limit_pos": 1.5, **INC,
    },
    "shift_v(arctan, 0)": {**ODD, **B},
    "clip(asinh, 2)": {
        **ODD, "bounded": True, "range_min": -2.0, "range_max": 2.0,
        **kinks(-math.sinh(2), math.sinh(2)), "slope0": 1.0,
    },
    "clip(linear, 0.5)": {**ODD, "bounded": True, "range_max": 0.5, **kinks(-0.5, 0.5)},
    "clip(logsign, 5)": {**ODD, "bounded": True, "range_max": 5.0},
    "linear_part(erf, 0.1)": {
        **ODD, **INC, **SMOOTH, "bounded": False, "growth": "linear", "slope0": 0.9 * SQ + 0.1,
    },
    "linear_part(isru, 0.5)": {**ODD, "bounded": False, "growth": "linear", "slope0": 1.0},
    "flat_centre(tanh, 1)": {
        **ODD, **B, **INC, "flat_halfwidth": 1.0, "flat_region": (-1.0, 1.0), "slope0": 0.0,
        **kinks(-1.0, 1.0),
    },
    "flat_centre(erf, 0.1)": {**ODD, **B, "flat_halfwidth": 0.1, **kinks(-0.1, 0.1)},
    "flat_centre(shift_v(erf, 0.5), 1)": {
        "f0": 0.0, "odd": False, "continuous": False, "discontinuities": (-1.0, 1.0),
        "flat_halfwidth": 1.0,
    },
    "sign_flip(arctan)": {
        **ODD, **B, **SMOOTH, "monotone": "decreasing", "slope0": -2 / math.pi,
        "limit_pos": -1.0, "limit_neg": 1.0,
    },
    "sign_flip(shift_h(tanh, 0.1))": {
        "zero_centred": False, "odd": False, "monotone": "decreasing", "f0": -math.tanh(0.1),
    },
}  # fmt: skip
