"""One trial with its curves and diagnostics."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from normfree.api import schemas as S
from normfree.jsonsafe import finite, readable_mapping

log = logging.getLogger(__name__)


# The fields an answer takes from a trial's dict, read once: pydantic's ``model_fields`` is a
# property, and read per key it was a sixth of rendering a trial.
_FIELDS = frozenset(S.TrialPublic.model_fields) - {"curves"}


def trial_public(t: dict, *, private: bool = False, finite_already: bool = False) -> S.TrialPublic:
    """A stored trial (``storage.reads.trial_detail``) as the API shows it. ``finite_already``:
    ``t`` holds no NaN or infinity (``storage.reads.current_document(finite=True)``), and is
    not walked again."""
    from normfree.workers.errors import public_error, public_worker

    t = dict(t) if finite_already else finite(t)
    unreadable = list(t.get("unreadable") or [])
    for field in ("axis_values", "config", "metrics"):
        if field in unreadable:  # not JSON at all: null, named once
            t[field] = None
        else:
            t[field] = readable_mapping(t.get(field), field, unreadable)
    t["curves"] = _readable_points(t.get("curves"), "metrics", "curve metrics", unreadable)
    t["diagnostics"] = _readable_points(
        t.get("diagnostics"), "extra", "diagnostic extras", unreadable
    )
    t["unreadable"] = unreadable
    if not private:
        t["error"] = public_error(t.get("error"), t.get("worker"))
        t["worker"] = public_worker(t.get("worker"))
    return S.TrialPublic(
        **{k: v for k, v in t.items() if k in _FIELDS},
        objective_value=t.get("value"),
        curves=t.get("curves") or [],
    )


def _readable_points(
    points: Any, field: str, what: str, unreadable: list[str]
) -> list[dict[str, Any]]:
    """Curve points (or diagnostics) whose ``field`` is a mapping as stored; a point whose
    ``field`` is JSON of another shape keeps its other values, that field shown empty and
    named in ``unreadable`` (one corrupt epoch must not cost the trial its curves)."""
    if not isinstance(points, list):
        if points:
            unreadable.append(what)
        return []
    out = []
    for p in points:
        if not isinstance(p, Mapping):
            unreadable.append(what)
            continue
        if not isinstance(p.get(field), Mapping):
            where = f"epoch {p.get('epoch')}"
            if p.get("layer") is not None:
                where += f", {p.get('layer')}"
            unreadable.append(f"{what} ({where})")
            p = {**p, field: {}}
        out.append(p)
    return out
