"""Candidates: submit a formula, list and filter the search space, inspect one with its plot."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from normfree.api import cache, links, offload, prescreens, reads, security, services
from normfree.api.deps import (
    ArchivedQuery,
    DryRunQuery,
    GroupQuery,
    PropertyQuery,
    Reader,
    StateDep,
    WritePrincipal,
    WriterToken,
    check_principal,
)
from normfree.api.errors import ErrorBody, write_errors
from normfree.api.routers import add_action
from normfree.api.schemas import (
    ArchiveState,
    CandidateCreate,
    CandidateList,
    CandidatePublic,
    CandidateSubmitted,
    PlotData,
    PrescreenPublic,
    StudyDeleted,
)
from normfree.api.services import housekeeping

# A stored candidate's name, as submitted (``services.check_submission_name`` bounds it).
StoredName = Annotated[str, Path(min_length=1, max_length=200)]

router = APIRouter(prefix="/candidates", tags=["candidates"])

_ERRORS = write_errors("Unknown or revoked token.")


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
        202: {
            "model": CandidateSubmitted,
            "description": "Accepted; its prescreen runs now (Location: the candidate, whose "
            "prescreen shows the result).",
        },
        409: {"model": ErrorBody, "description": "The name is taken by another function."},
        **_ERRORS,
    },
)
async def submit_candidate(
    request: Request,
    data: CandidateCreate,
    state: StateDep,
    token: WriterToken,
    response: Response,
) -> CandidateSubmitted:
    """Submit f(u): answers its canonical form, properties, the zero-cost prescreen, and
    ``duplicate_of`` when it is the same function as a known candidate (nothing is stored then).

    The prescreen (seconds of training) runs after the answer unless this function's is already
    known: then the answer is 202 with ``prescreen.status = "pending"`` and a ``Location``; GET
    it for the result. A formula the parser refuses answers 422 with the reason and its
    character position.
    """

    parsed = services.parsed_submission(data.formula, data.name)
    if parsed is None:
        # a formula this process has not parsed: the token first (no parse for a refused
        # request), then the parse in a worker process (api.offload), never here
        submitter = (await reads.quick(state, check_principal, state, token)).name
        parsed = await parsed_submission(request, state, data, submitter)

    def submit() -> CandidateSubmitted:
        # the token's check and the submission in one thread-pool call (each hand-off cost
        # as much as a known function's whole submission under 32 clients)
        who = check_principal(state, token)
        return services.submit_candidate(
            state, data, submitter=who.name, parsed=parsed, owner_token_id=who.id
        )

    result = await reads.quick(state, submit)
    if not result.created:
        response.status_code = 200
    if result.prescreen is not None and result.prescreen.status == "pending":
        response.status_code = 202
        response.headers["Location"] = f"/api/candidates/{result.duplicate_of or result.name}"
    return result


@router.get("", response_model=CandidateList)
async def list_candidates(
    request: Request,
    state: StateDep,
    _reader: Reader,
    group: GroupQuery = None,
    properties: PropertyQuery = None,
    source: Literal["catalog", "user"] | None = None,
    q: Annotated[str | None, Query(max_length=100, description="Name contains.")] = None,
    archived: ArchivedQuery = False,
) -> Response:
    """The catalog and stored user candidates, filtered by group, properties, source, name
    (archived ones only with ``?archived=true``).

    Cached until a candidate is stored; sends an ETag (``If-None-Match`` answers 304)."""
    params = (group, tuple(properties or ()), source, q) + (("archived",) if archived else ())
    key = await reads.small_read(state, reads.candidates_key, state, *params)
    return await cache.serve(
        request,
        state.cache,
        key,
        lambda: cache.json_body(
            reads.candidates(
                state,
                group=group,
                properties=properties,
                source=source,
                q=q,
                key=key,
                archived=archived,
            )
        ),
    )


# ``{name:path}``: a name may be a formula, and a formula may hold "/" (``u/(1+abs(u))``, sent
# as ``u%2F(1%2Babs(u))``, which the server decodes before routing); the results route comes
# first, so that ``.../results`` is not read as part of a name. Stored names hold no "/".
@router.get(
    "/{name:path}/results", response_model=list[dict], responses={404: {"model": ErrorBody}}
)
async def get_candidate_results(
    request: Request,
    state: StateDep,
    _reader: Reader,
    name: Annotated[str, Path(max_length=300, description="Name or transform call.")],
) -> list[dict]:
    """The leaderboard rows of every arm that ran this function, across proxies: arms with
    options (``erf [shift=scalar]``), and other names of the same function (a stored duplicate,
    or a transform that is the identity: ``shift_h(erf, 0)`` is erf)."""
    name = links.name_in_path(request, name, "/results")
    parsed = await parsed_name(request, state, name)

    def answer() -> list[dict]:
        if parsed is None:
            _cand, pub = services.get_candidate_object(state, name)
        else:
            pub = parsed[1]
        return reads.candidate_results(state, pub.name, pub.fingerprint)

    return await run_in_threadpool(answer)


@router.get("/{name:path}", response_model=CandidateDetail, responses={404: {"model": ErrorBody}})
async def get_candidate(
    request: Request,
    state: StateDep,
    _reader: Reader,
    name: Annotated[str, Path(max_length=300, description="Name or transform call.")],
) -> Response:
    """One candidate (a catalog name, a transform call like ``shift_h(erf, 0.5)``, or a stored
    user name) with f and f' on u in [-5, 5] and its leaderboard rows across proxies.

    Names that must be parsed are rate-limited per anonymous client (429, see api.security)
    and parsed in a worker process (api.offload: 422 past its time limit). A stored field that
    cannot be read (a corrupt row) is empty and named in ``unreadable``.

    Cached per name until a write it shows (the candidates, its prescreen, any board) moves
    (``reads.candidate_key``); sends an ETag."""
    name = links.name_in_path(request, name)
    key = await reads.small_read(state, reads.candidate_key, state, name)
    fast = cache.answer_from_cache(request, state.cache, key)
    if fast is not None:  # a hit costs no thread hop, no parse and no rate-limit charge
        return fast
    parsed = await parsed_name(request, state, name)

    def answer() -> cache.Cached:
        if parsed is None:
            cand, pub = services.get_candidate_object(state, name)
            plot = services.candidate_plot(cand)
        else:
            cand, pub, plot = parsed
        unreadable = list(pub.unreadable)
        stored = state.repo.get_candidate(pub.name)
        prescreen = prescreens.status(state, stored, pub.fingerprint, unreadable)
        return cache.json_body(
            CandidateDetail(
                **{**pub.model_dump(), "unreadable": unreadable},
                plot=plot,
                results=reads.candidate_results(state, pub.name, pub.fingerprint),
                prescreen=prescreen,
            )
        )

    # a known name's answer is kept; a formula's (hostile clients send thousands of distinct
    # ones) is built and not stored, so it cannot push the shared entries out
    known = parsed is None
    return await run_in_threadpool(
        cache.respond, request, state.cache, key, answer, store=known, replay=known
    )


# -- housekeeping (api.services.housekeeping) ------------------------------------------------

_OWNED = {
    **write_errors(
        "Unknown, revoked or read-only token, or a candidate another token submitted (only it "
        "or an admin token may change it)."
    ),
    404: {"model": ErrorBody, "description": "No stored candidate of that name."},
}


@router.delete(
    "/{name}",
    response_model=StudyDeleted,
    responses={**_OWNED, 409: {"model": ErrorBody, "description": "A study ran it."}},
)
def delete_candidate(
    state: StateDep, who: WritePrincipal, name: StoredName, dry_run: DryRunQuery = False
) -> StudyDeleted:
    """Delete a stored candidate that no study ran. One a study ran answers 409 with the
    studies (``detail.used_by_studies``): its formula is what their leaderboard arms show;
    archive it instead, or delete those studies first. ``?dry_run=true`` says whether it
    can be deleted (``removes.blocked``) and removes nothing."""
    return housekeeping.delete_candidate(state, name, who, dry_run=dry_run)


def _archive(archived: bool) -> Callable[..., ArchiveState]:
    def route(state: StateDep, who: WritePrincipal, name: StoredName) -> ArchiveState:
        return housekeeping.archive(state, "candidate", name, who, archived=archived)

    return route


for _archived, _verb, _doc in (
    (
        True,
        "archive",
        "Hide a stored candidate from the list (``?archived=true`` shows it); studies and "
        "leaderboards that ran it are unchanged.",
    ),
    (False, "unarchive", "Show an archived candidate in the list again."),
):
    add_action(
        router,
        f"/{{name}}/{_verb}",
        _archive(_archived),
        name=f"{_verb}_candidate",
        doc=_doc,
        response_model=ArchiveState,
        responses=_OWNED,
    )


async def parsed_name(request: Request, state: services.ServiceState, name: str) -> Any:
    """None for a known name (a lookup, answered in the thread pool); for a name that must be
    parsed, the rate limit (api.security) and then the parse in a worker process."""
    known = await reads.quick(state, security.known_name, request, name)
    if known:
        return None
    await reads.quick(state, security.limit_parse, request)
    return await offload.pool(request).call(
        security.client_id(request), "normfree.api.services.candidates:parse_for_read", name
    )


async def parsed_submission(
    request: Request,
    state: services.ServiceState,
    data: CandidateCreate,
    submitter: str | None = None,
) -> Any:
    """A submission's parse (``services.parse_submission``): remembered by this process, else
    made in a worker process after the name's check (a catalog name is refused unparsed)."""
    parsed = services.parsed_submission(data.formula, data.name)
    if parsed is None:
        await reads.quick(state, services.check_submission_name, data.name)
        parsed = await offload.pool(request).call(
            security.queue_key(request, submitter),  # the checked token's queue
            "normfree.api.services.candidates:parse_submission",
            data.formula,
            data.name,
        )
        services.remember_parsed(data.formula, data.name, parsed)
    return parsed
