"""One JSON sanitiser for every layer: what a non-finite float becomes, decided in one place.

JSON has no NaN or infinity, and a diverged trial's loss or a property's limit is exactly that,
so every answer that may hold one passes through :func:`finite`. Two readings exist, both on
purpose: in results (trials, leaderboards, properties) a non-finite number is "no value"
(``None``); in a prescreen's diagnostics it is the finding itself (``"nan"``, ``"inf"``), so the
caller asks for text there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any, Literal

NonFinite = Literal["null", "text"]


_LEAVES = (str, int, bool, type(None))


def finite(obj: Any, nonfinite: NonFinite = "null") -> Any:
    """``obj`` with every non-finite float replaced (recursively through mappings and lists)."""
    kind = type(obj)  # exact types first: an ABC isinstance per value was most of a trial's
    if kind in _LEAVES:  # sanitising (every API trial read passes through here)
        return obj
    if kind is dict and nonfinite == "null":
        # leaves inline: a board's rows are ~40 values each, most of them leaves, and a call
        # per value was a tenth of a board's rebuild under a writer
        return {
            k: v if type(v) in _LEAVES or (type(v) is float and math.isfinite(v)) else finite(v)
            for k, v in obj.items()
        }
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if nonfinite == "null" else str(obj)
    if isinstance(obj, Mapping):
        return {str(k) if nonfinite == "text" else k: finite(v, nonfinite) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if nonfinite == "null":
            return [
                v if type(v) in _LEAVES or (type(v) is float and math.isfinite(v)) else finite(v)
                for v in obj
            ]
        return [finite(v, nonfinite) for v in obj]
    return obj


def plain(obj: Any) -> Any:
    """A pydantic model, a ``to_dict`` object or a dataclass as plain data; others unchanged."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return obj


def readable_mapping(obj: Any, what: str, unreadable: list[str]) -> dict[str, Any] | None:
    """``obj`` as a dict if it is a mapping; else None, with ``what`` added to ``unreadable``.

    Why: a JSON column of a row corrupted by hand or by a crash reads as None (text that is not
    JSON, ``storage.db.tolerant_json_loads``) or as JSON of the wrong shape (a string, a list);
    an answer built from it would fail whole (a 500). The API shows such a field as null and
    names it in the answer's ``unreadable`` list instead."""
    if isinstance(obj, Mapping):
        return dict(obj)
    unreadable.append(what)
    return None
