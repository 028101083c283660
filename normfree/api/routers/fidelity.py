"""Fidelity: how far a proxy's (or a study's) ranking predicts published at-scale results."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from normfree.api import fidelity
from normfree.api.deps import Reader, StateDep, StudyIdQuery
from normfree.api.errors import ErrorBody
from normfree.api.schemas import FidelityReport

router = APIRouter(prefix="/fidelity", tags=["fidelity"])


@router.get("", response_model=FidelityReport, responses={404: {"model": ErrorBody}})
async def get_fidelity(
    request: Request,
    state: StateDep,
    _reader: Reader,
    proxy: Annotated[str | None, Query(max_length=100, examples=["vit-screen"])] = None,
    study_id: StudyIdQuery = None,
    reference: Annotated[str, Query(max_length=100)] = "published",
) -> FidelityReport:
    """Compare ``proxy`` (trials run in its preset setting) or study ``study_id`` with a
    reference set: the cells both have, Spearman and Kendall rank correlation with bootstrap
    intervals over seeds, the published pairwise orders the proxy reproduces, and failure
    agreement (published "failed to train" against diverged trials). Computed in a worker
    process (``api.offload``: the client's queue, a time limit), never on the server's loop."""
    return await fidelity.report_off_loop(
        request, state, proxy=proxy, study_id=study_id, reference=reference
    )
