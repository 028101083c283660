"""Candidates: submit a formula, list and filter the search space, inspect one with its plot."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field

from normfree.api import services
from normfree.api.deps import Reader, StateDep, Writer
from normfree.api.errors import ErrorBody
from normfree.api.schemas import (
    CandidateCreate,
    CandidateList,
    CandidatePublic,
    CandidateSubmitted,
    PlotData,
    PrescreenPublic,
)

router = APIRouter(prefix="/candidates", tags=["candidates"])

_ERRORS = {
    401: {"model": ErrorBody, "description": "No bearer token."},
    403: {"model": ErrorBody, "description": "Unknown or revoked token."},
}
PropertyFilter = Annotated[
    list[str] | None,
    Query(
        alias="property",
        max_length=10,
        description="Repeatable. 'bounded' (the property holds) or 'name=value', e.g. "
        "'monotone=increasing'.",
    ),
]


class CandidateDetail(CandidatePublic):
    """One candidate, with f and f' sampled for plotting and its results per proxy."""

    plot: PlotData | None = None
    results: list[dict] = Field(default_factory=list)
    prescreen: PrescreenPublic | None = Field(
        default=None, description="The submission's prescreen, when this server ran it."
    )


@router.post(
    "",
    response_model=CandidateSubmitted,
    status_code=201,
    responses={
        200: {"model": CandidateSubmitted, "description": "Already known: nothing stored."},
        409: {"model": ErrorBody, "description": "The name is taken by another function."},
        **_ERRORS,
    },
)
def submit_candidate(
    data: CandidateCreate, state: StateDep, who: Writer, response: Response
) -> CandidateSubmitted:
    """Submit f(u): answers its canonical form, properties, the zero-cost prescreen, and
    ``duplicate_of`` when it is the same function as a known candidate (nothing is stored then).

    A formula the parser refuses answers 422 with the reason and its character position.
    """
    result = services.submit_candidate(state, data, submitter=who)
    if not result.created:
        response.status_code = 200
    return result


@router.get("", response_model=CandidateList)
def list_candidates(
    state: StateDep,
    _reader: Reader,
    group: Annotated[str | None, Query(max_length=100)] = None,
    properties: PropertyFilter = None,
    source: Literal["catalog", "user"] | None = None,
    q: Annotated[str | None, Query(max_length=100, description="Name contains.")] = None,
) -> CandidateList:
    """The catalog and stored user candidates, filtered by group, properties, source, name."""
    return services.list_candidates(state, group=group, properties=properties, source=source, q=q)


@router.get("/{name}", response_model=CandidateDetail, responses={404: {"model": ErrorBody}})
def get_candidate(
    state: StateDep,
    _reader: Reader,
    name: Annotated[str, Path(max_length=300, description="Name or transform call.")],
) -> CandidateDetail:
    """One candidate (a catalog name, a transform call like ``shift_h(erf, 0.5)``, or a stored
    user name) with f and f' on u in [-5, 5] and its leaderboard rows across proxies."""
    cand, pub = services.get_candidate_object(state, name)
    return CandidateDetail(
        **pub.model_dump(),
        plot=services.candidate_plot(cand),
        results=services.candidate_results(state, pub.name),
        prescreen=services.cached_prescreen(pub.fingerprint),
    )
