"""Trials: one training run with its learning curves and per-layer diagnostics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from normfree.api import services
from normfree.api.deps import Reader, StateDep
from normfree.api.errors import ErrorBody
from normfree.api.schemas import TrialPublic

router = APIRouter(prefix="/trials", tags=["trials"])

TrialId = Annotated[int, Path(ge=1, le=2**31 - 1)]


@router.get("/{trial_id}", response_model=TrialPublic, responses={404: {"model": ErrorBody}})
def get_trial(state: StateDep, _reader: Reader, trial_id: TrialId) -> TrialPublic:
    """A trial's config, status, final metrics, per-epoch curves and per-layer diagnostics."""
    return services.get_trial(state, trial_id)
