"""Studies: create (and start in the background), list, inspect with progress, control."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from normfree.api import budget, cache, export, offload, reads, security, services
from normfree.api.deps import (
    ArchivedQuery,
    ArmPath,
    DryRunQuery,
    FormatQuery,
    IdPath,
    Reader,
    StateDep,
    WritePrincipal,
)
from normfree.api.errors import ApiError, ErrorBody, write_errors
from normfree.api.routers import add_action
from normfree.api.schemas import (
    ArchiveState,
    ArmList,
    StudyCreate,
    StudyDeleted,
    StudyDetail,
    StudyList,
    StudyPatch,
    StudyPublic,
    TrialPage,
)
from normfree.api.services import housekeeping
from normfree.specs import StudyKindName, StudyStatus, TrialRowStatus

router = APIRouter(prefix="/studies", tags=["studies"])

_AUTH = write_errors()
_CONTROL = {
    404: {"model": ErrorBody},
    409: {"model": ErrorBody, "description": "Not allowed from the study's status."},
    **write_errors(
        "Unknown, revoked or read-only token, or a study of another token (only its creator or "
        "an admin token may control it)."
    ),
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
    tag: Annotated[str | None, Query(max_length=40, description="Only studies with it.")] = None,
    archived: ArchivedQuery = False,
) -> StudyList:
    """Studies, newest first, with their progress, tags and note (archived ones only with
    ``?archived=true``)."""
    return services.list_studies(state, status=status, kind=kind, tag=tag, archived=archived)


@router.get("/{study_id}", response_model=StudyDetail, responses={404: {"model": ErrorBody}})
async def get_study(
    request: Request,
    state: StateDep,
    _reader: Reader,
    study_id: IdPath,
    trials: Annotated[
        bool, Query(description="Include a page of the study's trials (false: the summary).")
    ] = True,
    trials_limit: Annotated[int, Query(ge=1, le=1000, description="Trials in the page.")] = 100,
    trials_cursor: Annotated[
        str | None,
        Query(max_length=20, description="``trials_next_cursor`` of the previous answer."),
    ] = None,
) -> Response:
    """A study with its progress, its cells (mean and CI per arm) and a page of its trials.

    The trials come a page at a time (a study may have thousands; no default answer lists them
    all): ``trials_next_cursor`` names the next page, for ``?trials_cursor=`` here or
    ``cursor=`` on /api/studies/{id}/trials (the same pages). Cached until a trial of the
    study starts or finishes or its status changes, and sends an ETag (``If-None-Match``
    answers 304)."""

    async def current_key() -> reads.Key:
        key = await reads.small_read(state, reads.study_key, state, study_id)
        if trials:
            key = reads.derived("study-detail", key, trials_limit, trials_cursor)
        return key

    key = await current_key()

    def build() -> cache.Cached:
        summary = reads.study_summary(state, study_id, key)
        if not trials:
            return cache.json_body(summary)
        page = services.list_study_trials(state, study_id, limit=trials_limit, cursor=trials_cursor)
        paged = {"trials": page.items, "trials_next_cursor": page.next_cursor}
        return cache.json_body(summary.model_copy(update=paged))

    return await cache.serve(
        request, state.cache, key, build, replay=not reads.driven(key), rekey=current_key
    )


@router.get(
    "/{study_id}/trials",
    response_model=TrialPage,
    responses={404: {"model": ErrorBody}, **export.FILE_RESPONSES},
)
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
    format: FormatQuery = "json",
) -> TrialPage | Response:
    """A study's trials, a page at a time, in id order. Paging by id (not by offset) means a
    trial that finishes or is added while a client pages never makes a row appear twice or go
    missing. ``format=csv|parquet``: every trial (of ``status``) as one file, a row per trial
    with its config, metrics and diagnostics summary (``api.export``; no paging)."""
    statuses = list(status) if status else None
    if format != "json":
        if cursor is not None:
            raise ApiError(
                422, "invalid_cursor", "cursor pages the JSON list; a file is the whole study"
            )
        return export.respond(
            export.trial_rows(state, study_id, statuses), format, f"study-{study_id}-trials"
        )
    return services.list_study_trials(state, study_id, limit=limit, cursor=cursor, status=statuses)


@router.get(
    "/{study_id}/arms",
    response_model=ArmList,
    responses={404: {"model": ErrorBody}, **export.FILE_RESPONSES},
)
def list_study_arms(
    state: StateDep, _reader: Reader, study_id: IdPath, format: FormatQuery = "json"
) -> ArmList | Response:
    """A study's arms (its cells: mean and CI per function and transform value or option
    combination), as ``GET /api/studies/{id}`` shows them; ``format=csv|parquet`` as a file."""
    if format != "json":
        return export.respond(export.arm_rows(state, study_id), format, f"study-{study_id}-arms")
    cells = services.get_study(state, study_id, trials=False).cells
    return ArmList(study_id=study_id, count=len(cells), items=cells)


@router.get(
    "/{study_id}/curves",
    response_class=Response,
    responses={
        200: {
            "description": "The curves as a file: one row per trial, epoch and metric.",
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/vnd.apache.parquet": {
                    "schema": {"type": "string", "format": "binary"}
                },
                "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
            },
        },
        404: {"model": ErrorBody, "description": "No such study, or a trial not of it."},
        406: export.FILE_RESPONSES[406],
    },
)
def study_curves(
    state: StateDep,
    _reader: Reader,
    study_id: IdPath,
    trials: Annotated[
        list[str] | None,
        Query(
            max_length=2000,
            description="Only these trials of the study: ids comma-separated or repeated.",
        ),
    ] = None,
    format: Annotated[
        Literal["csv", "parquet", "json"],
        Query(description="csv (the default), parquet, or json (an array of flat records)."),
    ] = "csv",
) -> Response:
    """The learning curves of a study's trials as a file, long: a row per (trial, epoch,
    metric) with ``study_id, trial_id, candidate, seed, status, epoch, step, wall_time_s,
    metric, value`` (``api.export.curve_rows``); the metrics are ``train_loss``, the epoch's
    validation metrics and ``lr``. Always a file, never a JSON page: the whole study, or the
    trials named. One trial's curves as JSON are in ``GET /api/trials/{id}``."""
    from normfree.api.compare import split_items
    from normfree.api.inputs import db_int

    ids = [db_int(t, "trials", minimum=1) for t in split_items(trials)] if trials else None
    name = f"study-{study_id}-curves" + (f"-trial-{ids[0]}" if ids and len(ids) == 1 else "")
    return export.respond(export.curve_rows(state, study_id, ids), format, name)


def _control(action: str) -> Callable[..., StudyPublic]:
    def route(state: StateDep, who: WritePrincipal, study_id: IdPath) -> StudyPublic:
        return services.control_study(state, study_id, action, who)

    return route


for _action, _doc in (
    (
        "pause",
        "Pause: no new trials start; running ones stop at their next epoch report and "
        "go back to waiting.",
    ),
    ("resume", "Resume a paused study (it is driven in the background again)."),
    ("cancel", "Cancel: waiting trials are dropped, running ones stop at their next report."),
):
    add_action(
        router,
        f"/{{study_id}}/{_action}",
        _control(_action),
        name=f"{_action}_study",
        doc=_doc,
        response_model=StudyPublic,
        responses=_CONTROL,
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
def delete_study(
    state: StateDep, who: WritePrincipal, study_id: IdPath, dry_run: DryRunQuery = False
) -> StudyDeleted:
    """Delete a finished study with its trials (curves, diagnostics) and its Optuna study
    (cancel it first). Only the token that created it, or an admin token, may; its proxy's
    leaderboard drops it. The answer's ``removes`` lists what went; ``?dry_run=true`` lists
    it and removes nothing. Archiving (``POST .../archive``) hides it and keeps every row."""
    return services.delete_study(state, study_id, who, dry_run=dry_run)


# -- housekeeping: archives, arms, tags and notes (api.services.housekeeping) ----------------


@router.patch("/{study_id}", response_model=StudyPublic, responses=_CONTROL)
def patch_study(
    state: StateDep, who: WritePrincipal, study_id: IdPath, data: StudyPatch
) -> StudyPublic:
    """Add or remove tags (``add_tags``, ``remove_tags``) and set the note (``note``; an
    empty string clears it). Tags are 1-40 characters without spaces or commas, at most 20."""
    return housekeeping.patch_study(state, study_id, data, who)


def _archive(archived: bool) -> Callable[..., ArchiveState]:
    def route(state: StateDep, who: WritePrincipal, study_id: IdPath) -> ArchiveState:
        return housekeeping.archive(state, "study", study_id, who, archived=archived)

    return route


def _archive_arm(archived: bool) -> Callable[..., ArchiveState]:
    def route(
        state: StateDep, who: WritePrincipal, study_id: IdPath, arm_key: ArmPath
    ) -> ArchiveState:
        return housekeeping.archive_arm(state, study_id, arm_key, who, archived=archived)

    return route


for _archived, _verb, _study_doc, _arm_doc in (
    (
        True,
        "archive",
        "Archive a finished study: it leaves lists and leaderboards (``?archived=true`` shows "
        "it), every row kept.",
        "Take one arm of the study (a cell's ``arm_keys``) off the leaderboards; the study "
        "still shows it, marked archived.",
    ),
    (
        False,
        "unarchive",
        "Restore an archived study to lists and leaderboards.",
        "Put an archived arm of the study back on the leaderboards.",
    ),
):
    for _path, _route, _name, _doc in (
        (f"/{{study_id}}/{_verb}", _archive(_archived), f"{_verb}_study", _study_doc),
        (
            f"/{{study_id}}/arms/{{arm_key}}/{_verb}",
            _archive_arm(_archived),
            f"{_verb}_arm",
            _arm_doc,
        ),
    ):
        add_action(
            router,
            _path,
            _route,
            name=_name,
            doc=_doc,
            response_model=ArchiveState,
            responses=_CONTROL,
        )


@router.delete("/{study_id}/arms/{arm_key}", response_model=StudyDeleted, responses=_CONTROL)
def delete_arm(
    state: StateDep,
    who: WritePrincipal,
    study_id: IdPath,
    arm_key: ArmPath,
    dry_run: DryRunQuery = False,
) -> StudyDeleted:
    """Delete one arm of a finished study: its trials, curves and diagnostics; its proxy's
    leaderboard is folded again without them (the Optuna study keeps its history). The
    answer's ``removes`` lists what went; ``?dry_run=true`` lists it and removes nothing."""
    return housekeeping.delete_arm(state, study_id, arm_key, who, dry_run=dry_run)
