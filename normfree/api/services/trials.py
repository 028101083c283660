"""One trial with its curves and diagnostics."""

from __future__ import annotations

import logging

from normfree.api import schemas as S
from normfree.jsonsafe import finite

log = logging.getLogger(__name__)


def trial_public(t: dict, *, private: bool = False) -> S.TrialPublic:
    """A stored trial (``storage.reads.trial_detail``) as the API shows it."""
    from normfree.workers.errors import public_error, public_worker

    t = finite(t)
    if not private:
        t["error"] = public_error(t.get("error"), t.get("worker"))
        t["worker"] = public_worker(t.get("worker"))
    return S.TrialPublic(
        **{k: v for k, v in t.items() if k in S.TrialPublic.model_fields and k != "curves"},
        objective_value=t.get("value"),
        curves=t.get("curves") or [],
    )
