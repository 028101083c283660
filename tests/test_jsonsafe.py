"""The one JSON sanitiser: non-finite floats become null in results, text in diagnostics."""

from __future__ import annotations

import json
import math

from normfree.jsonsafe import finite, plain
from normfree.specs import NormSpec


def test_results_read_nan_as_no_value() -> None:
    row = {"value": math.nan, "curve": (1.0, math.inf, -math.inf), "n": 3, "name": "erf"}
    assert finite(row) == {"value": None, "curve": [1.0, None, None], "n": 3, "name": "erf"}
    json.dumps(finite(row), allow_nan=False)  # valid JSON


def test_diagnostics_keep_nan_as_text() -> None:
    out = finite({1: math.nan, "grad": [math.inf]}, "text")
    assert out == {"1": "nan", "grad": ["inf"]}


def test_plain_turns_models_into_data() -> None:
    assert plain(NormSpec(name="erf"))["name"] == "erf"
    assert plain(3) == 3
