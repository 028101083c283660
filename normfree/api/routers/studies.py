"""Studies: create (and start in the background), list, inspect with progress, control."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from normfree.api import budget, cache, offload, reads, security, services
from normfree.api.deps import IdPath, Reader, StateDep, WritePrincipal
from normfree.api.errors import ErrorBody
from normfree.api.schemas import (
    StudyCreate,
    StudyDeleted,
    StudyDetail,
    StudyList,
    StudyPublic,
    TrialPage,
)
from normfree.specs import StudyKindName, StudyStatus, TrialRowStatus

router = APIRouter(prefix="/studies", tags=["studies"])

_AUTH = {
    401: {"model": ErrorBody, "description": "No bearer token."},
    403: {"model": ErrorBody, "description": "Unknown, revoked or read-only token."},
}
_CONTROL = {
    404: {"model": ErrorBody},
    409: {"model": ErrorBody, "description": "Not allowed from the study's status."},
    **_AUTH,
    403: {
        "model": ErrorBody,
        "description": "Unknown, revoked or read-only token, or a study of another token "
        "(only its creator or an admin token may control it).",
    },
}


@router.post(
    "",
    response_model=StudyPublic,
    status_code=201,
    responses={
        429: {"model": ErrorBody, "description": "Over the token's budget of trial-seconds."},
        **_AUTH,
    },
)
async def create_study(
    request: Request, data: StudyCreate, state: StateDep, who: WritePrincipal
) -> StudyPublic:
    """Create a property study, an options study or a function search (the options of
    ``normfree study ...``). Its trials are planned now; it runs in the background (the answer
    does not wait), and ``GET /api/studies/{id}`` shows its progress. The study belongs to
    the token that created it: only it (or an admin token) may pause, resume or cancel it.

    The check (formula parses, the plan's cost) and the planning run in a worker process; a
    study that would take the token's unfinished studies over its budget of trial-seconds
    answers 429 with Retry-After and the figures (api.budget)."""
    pool, client = offload.pool(request), security.queue_key(request, who.name)
    settings = state.settings
    spec, estimate = await pool.call(
        client,
        "normfree.api.services.studies:check_request",
        settings,
        data,
        what="the study",
        seconds=settings.offload_study_seconds,
    )
    ledger: budget.TokenBudget = request.app.state.token_budget
    async with ledger.lock(who.id):
        await run_in_threadpool(ledger.check, state, who.id, estimate.trial_seconds)
        # The writes run in this process (a thread), not a worker: a creation must end with
        # the server that answers for it, so that a SIGKILL leaves a `creating` row for the
        # next start to remove, never a worker finishing it after that start's recovery.
        study_id = await run_in_threadpool(services.studies.plan, settings, spec, who.id)
    return await run_in_threadpool(services.created, state, study_id, estimate)


@router.get("", response_model=StudyList)
def list_studies(
    state: StateDep,
    _reader: Reader,
    status: StudyStatus | None = None,
    kind: StudyKindName | None = None,
) -> StudyList:
    """Studies, newest first, with their progress."""
    return services.list_studies(state, status=status, kind=kind)


@router.get("/{study_id}", response_model=StudyDetail, responses={404: {"model": ErrorBody}})
async def get_study(
    request: Request,
    state: StateDep,
    _reader: Reader,
    study_id: IdPath,
    trials: Annotated[
        bool,
        Query(
            description="Include every trial (a study may have thousands: page through "
            "/api/studies/{id}/trials instead)."
        ),
    ] = True,
) -> Response | StudyDetail:
    """A study with its progress, its cells (mean and CI per arm) and its trials.

    Without trials (``?trials=false``: the summary) it is cached until a trial of the study
    finishes or its status changes, and sends an ETag (``If-None-Match`` answers 304)."""
    if trials:
        return await run_in_threadpool(services.get_study, state, study_id)
    key = await reads.small_read(state, reads.study_key, state, study_id)
    return await cache.serve(
        request,
        state.cache,
        key,
        lambda: cache.json_body(services.get_study(state, study_id, trials=False)),
        replay=not reads.driven(key),
    )


@router.get("/{study_id}/trials", response_model=TrialPage, responses={404: {"model": ErrorBody}})
def list_study_trials(
    state: StateDep,
    _reader: Reader,
    study_id: IdPath,
    limit: Annotated[int, Query(ge=1, le=1000, description="Trials per page.")] = 100,
    cursor: Annotated[
        str | None, Query(max_length=20, description="next_cursor of the previous page.")
    ] = None,
    status: Annotated[
        list[TrialRowStatus] | None,
        Query(max_length=7, description="Repeatable: only trials in these statuses."),
    ] = None,
) -> TrialPage:
    """A study's trials, a page at a time, in id order. Paging by id (not by offset) means a
    trial that finishes or is added while a client pages never makes a row appear twice or go
    missing."""
    return services.list_study_trials(
        state, study_id, limit=limit, cursor=cursor, status=list(status) if status else None
    )


def _control(action: str):
    def route(state: StateDep, who: WritePrincipal, study_id: IdPath) -> StudyPublic:
        return services.control_study(state, study_id, action, who)

    route.__name__ = f"{action}_study"
    route.__doc__ = {
        "pause": "Pause: no new trials start; running ones stop at their next epoch report and "
        "go back to waiting.",
        "resume": "Resume a paused study (it is driven in the background again).",
        "cancel": "Cancel: waiting trials are dropped, running ones stop at their next report.",
    }[action]
    return route


for _action in ("pause", "resume", "cancel"):
    router.add_api_route(
        f"/{{study_id}}/{_action}",
        _control(_action),
        methods=["POST"],
        response_model=StudyPublic,
        responses=_CONTROL,
        name=f"{_action}_study",
    )


@router.delete(
    "/{study_id}",
    response_model=StudyDeleted,
    responses={
        **_CONTROL,
        409: {
            "model": ErrorBody,
            "description": "Not cancelled, complete or failed, or a trial of it still runs.",
        },
    },
)
def delete_study(state: StateDep, who: WritePrincipal, study_id: IdPath) -> StudyDeleted:
    """Delete a finished study with its trials and its Optuna study (cancel it first). Only
    the token that created it, or an admin token, may; its proxy's leaderboard drops it."""
    return services.delete_study(state, study_id, who)
