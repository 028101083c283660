"""Screens for the API: find an earlier screen, and describe one with its placement
(``workers.screens`` holds the shape and the reading; this only joins it to the service)."""

from __future__ import annotations

from typing import Any

from normfree.api.services.state import ServiceState
from normfree.jsonsafe import finite
from normfree.specs import StudySpec


def find(state: ServiceState, spec: StudySpec) -> int | None:
    """The study that already is this screen (``workers.screens.find_screen``), or None."""
    from normfree.workers.screens import find_screen

    return find_screen(state.repo, spec)


def describe(
    state: ServiceState, spec: StudySpec, study_id: int, found: bool, function: str
) -> dict[str, Any]:
    """A screen's study as ``ScreenOne`` reads it; the placement of ``function`` (as asked)
    once nothing is left to train."""
    from normfree.workers import screens

    progress = state.repo.study_progress(study_id)
    left = progress["counts"]["WAITING"] + progress["counts"]["RUNNING"]
    out: dict[str, Any] = {
        "proxy": spec.proxy,
        "study_id": study_id,
        "found_existing": found,
        "status": progress["status"],
        "trials": progress["total"],
        "reused": progress["reused"],
        "to_train": left,
        "placement": None,
    }
    if not left:
        rows = screens.screen_board(state, study_id, spec.proxy)
        # one of the 16 is placed as itself; another name as the validation spelled it (last)
        function = function if function in spec.functions else spec.functions[-1]
        line = screens.fidelity_line(state.db, spec.proxy)
        out["placement"] = finite(
            screens.placement(rows, function, spec.proxy, fidelity_headline=line)
        )
    return out
