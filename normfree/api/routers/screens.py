"""Screens: place a function among the paper's 16 search candidates (``normfree screen``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from normfree.api import budget, offload, security, services
from normfree.api.deps import StateDep, WritePrincipal
from normfree.api.errors import ApiError, ErrorBody, write_errors
from normfree.api.schemas import ScreenCreate, ScreenOne, ScreenPublic, StudyCreate
from normfree.api.services import screens as screen_service

router = APIRouter(prefix="/screens", tags=["screens"])


@router.post(
    "",
    response_model=ScreenPublic,
    responses={
        **write_errors(),
        422: {"model": ErrorBody, "description": "Unknown function or screen."},
        429: {"model": ErrorBody, "description": "Over the token's budget of trial-seconds."},
    },
)
async def create_screen(
    request: Request, data: ScreenCreate, state: StateDep, who: WritePrincipal
) -> ScreenPublic:
    """One options study per screen (default: the default ViT and DiT screens) of the 16
    search candidates + the function + LayerNorm + the identity, with the published operator
    (y = gamma f(alpha x + s) + beta). An earlier request for the same screen is found again
    instead of planned twice, and trials another study already ran (same key, same trainer
    code) are reused, not trained: on a database that holds the 16, only the function's seeds
    run. Studies run in the background; post again once they are done to read the placement
    (rank among the 16, rank reliability, the screen's fidelity and caveats).

    The check and planning run as ``POST /api/studies`` runs them (a worker process, the
    token's budget; the admission estimate counts the whole grid, reused trials included)."""
    from normfree.workers.proxies import DEFAULT_SCREENS, PROXIES
    from normfree.workers.screens import screen_spec

    proxies = list(dict.fromkeys(data.proxies)) or list(DEFAULT_SCREENS)
    unknown = [p for p in proxies if p not in PROXIES]
    if unknown:
        raise ApiError(422, "invalid_screen", f"unknown proxy {unknown[0]!r:.100}")
    pool, client = offload.pool(request), security.queue_key(request, who.name)
    settings = state.settings
    out = []
    for proxy in proxies:
        wanted = screen_spec(data.function, proxy, seeds=data.seeds)
        body = StudyCreate.model_validate(
            wanted.model_dump(include=set(StudyCreate.model_fields) - {"norm_shift"})
        )
        spec, estimate = await pool.call(
            client,
            "normfree.api.services.studies:check_request",
            settings,
            body,
            what="the screen",
            seconds=settings.offload_study_seconds,
        )
        study_id = await run_in_threadpool(screen_service.find, state, spec)
        found = study_id is not None
        if study_id is None:
            ledger: budget.TokenBudget = request.app.state.token_budget
            async with ledger.lock(who.id):
                await run_in_threadpool(ledger.check, state, who.id, estimate.trial_seconds)
                study_id = await run_in_threadpool(services.studies.plan, settings, spec, who.id)
            await run_in_threadpool(services.created, state, study_id, estimate)
        one = await run_in_threadpool(
            screen_service.describe, state, spec, study_id, found, data.function
        )
        out.append(ScreenOne.model_validate(one))
    return ScreenPublic(function=data.function, screens=out)
