"""The dashboard: server-rendered jinja2 pages with plotly figures.

Every page is built from the same service calls as the JSON API (so a page shows what
``/api/...`` answers), and every figure from :mod:`normfree.api.plots`. The pages follow the
read rule of the API (public unless ``public_reads`` is off; then they answer 401, since a browser
page cannot send a bearer token). The submit form carries a token field and checks it with the
same rule as ``POST /api/candidates`` (see :mod:`normfree.api.deps`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from normfree.api import (
    cache,
    fidelity,
    lines,
    links,
    page_format,
    plots,
    prescreens,
    reads,
    services,
)
from normfree.api.deps import (
    GroupQuery,
    IdPath,
    PropertyQuery,
    Reader,
    StateDep,
    StudyIdQuery,
    check_principal,
)
from normfree.api.errors import ApiError, describe_validation
from normfree.api.routers import candidates
from normfree.api.schemas import CandidateCreate
from normfree.specs import LIVE_STATUSES

router = APIRouter(include_in_schema=False)
log = logging.getLogger(__name__)
T = TypeVar("T")


class PageParts:
    """A page built part by part (a table, a plot, a summary): a part that fails on stored data
    is left out, logged with its exception and a reference, and named in the page's notices,
    so bad stored data never costs the whole page (a 500). ``ApiError`` (no such study, a
    refused name) is the page's answer, not a broken part, and passes through."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.notices: list[str] = []

    def build(self, what: str, make: Callable[[], T], default: T) -> T:
        try:
            return make()
        except ApiError:
            raise
        except Exception as exc:
            from normfree.workers.errors import new_reference

            ref = new_reference()
            log.exception("%s page: could not show %s [ref %s]", self.page, what, ref)
            self.notices.append(
                f"Could not show {what} ({type(exc).__name__} [ref {ref}]); the rest of the "
                "page is below, and the details are in the server log."
            )
            return default

    def note(self, text: str) -> None:
        self.notices.append(text)


def install_filters(templates: Jinja2Templates) -> None:
    from normfree.api.search import search_kinds

    page_format.install(templates.env)
    templates.env.globals["search_kinds"] = search_kinds()  # the kinds with a search view
    links.install(templates.env)


def _render(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    templates: Jinja2Templates = request.app.state.templates
    return templates.TemplateResponse(request, name, context, status_code=status_code)


@router.get("/", response_class=HTMLResponse, name="page_leaderboard")
async def page_leaderboard(
    request: Request,
    state: StateDep,
    _reader: Reader,
    proxy: Annotated[str | None, Query(max_length=100)] = None,
    group: GroupQuery = None,
    properties: PropertyQuery = None,
    archived: bool = False,
) -> Response:
    """The leaderboard of one proxy (default: the first with results); cached like its JSON.
    ``archived``: archived studies and arms count too."""
    wanted = [p for p in properties or [] if p]

    def keys() -> tuple[list[str], str | None, reads.Key | None, reads.Key]:
        proxies = list(
            reads.at_generation(state, ("proxies",), lambda: services.proxies_with_results(state))
        )
        shown = proxy or (proxies[0] if proxies else None)
        lb_key = (
            reads.leaderboard_key(state, shown, group or None, wanted, None, archived)
            if shown
            else None
        )
        family = (
            "page-leaderboard", str(request.base_url), shown, group, tuple(wanted), archived
        )  # fmt: skip
        versions = (tuple(proxies), lb_key[1] if lb_key else None, reads.candidates_key(state)[1])
        return proxies, shown, lb_key, (family, versions)

    proxies, proxy, lb_key, key = await reads.small_read(state, keys)

    async def current_key() -> reads.Key:
        return (await reads.small_read(state, keys))[3]

    def build() -> cache.Cached:
        parts = PageParts("leaderboard")
        board = None
        figure = None
        if proxy:
            board = parts.build(
                "the leaderboard",
                lambda: reads.leaderboard(
                    state,
                    proxy,
                    group=group or None,
                    properties=wanted,
                    key=lb_key,
                    archived=archived,
                ),
                None,
            )
            if board is not None and "fidelity" in board.unreadable:
                parts.note(
                    "Could not show the fidelity line (the details are in the server log); "
                    "the ranking is below."
                )
            damaged = [r.candidate for r in board.rows if r.unreadable] if board else []
            if damaged:
                parts.note(
                    f"Could not read part of the stored results of {', '.join(damaged)}; "
                    "those fields are shown empty."
                )
            if board is not None and any(r.ranked for r in board.rows):
                rows = [r.model_dump() for r in board.rows if r.ranked]
                figure = parts.build(
                    "the leaderboard's plot",
                    lambda: plots.to_div(
                        plots.leaderboard_figure(rows, board.objective), "lb-figure"
                    ),
                    None,
                )
        groups = parts.build("the group filter", lambda: reads.candidate_groups(state), [])
        return cache.html_body(
            _render(
                request,
                "leaderboard.html",
                notices=parts.notices,
                board=board,
                proxy=proxy,
                proxies=proxies,
                group=group,
                groups=groups,
                properties=properties or [],
                figure=figure,
                archived=archived,
            )
        )

    return await cache.serve(request, state.cache, key, build, rekey=current_key)


@router.get("/candidates", response_class=HTMLResponse, name="page_candidates")
def page_candidates(
    request: Request,
    state: StateDep,
    _reader: Reader,
    group: GroupQuery = None,
    properties: PropertyQuery = None,
) -> Response:
    parts = PageParts("candidates")
    listing = parts.build(
        "the candidates",
        lambda: reads.candidates(
            state, group=group or None, properties=[p for p in properties or [] if p]
        ),
        {"count": 0, "items": []},
    )
    return _render(request, "candidates.html", notices=parts.notices, listing=listing, group=group)


@router.get("/candidates/{name:path}", response_class=HTMLResponse, name="page_candidate")
async def page_candidate(
    request: Request, state: StateDep, _reader: Reader, name: Annotated[str, Path(max_length=300)]
) -> Response:
    """f and f', properties, prescreen (for stored submissions) and results across proxies.

    A name that resolves to nothing (a stored arm whose candidate was renamed, or a catalog
    name since retired) still shows its stored results, with a notice saying so."""
    name = links.name_in_path(request, name)
    found = await reads.small_read(state, reads.candidate_key, state, name)
    key = reads.derived("page-candidate", found, str(request.base_url))
    fast = cache.answer_from_cache(request, state.cache, key)
    if fast is not None:  # cached like the API's answer (routers.candidates)
        return fast
    # a name that must be parsed: the rate limit, then the parse in a worker (as the API's read)
    refused: ApiError | None = None
    parsed: Any = None
    try:
        parsed = await candidates.parsed_name(request, state, name)
    except ApiError as exc:
        if exc.status_code not in (404, 422):
            raise
        refused = exc
    known = parsed is None and refused is None

    def build() -> cache.Cached:
        return cache.html_body(_candidate_page(request, state, name, parsed, refused))

    return await run_in_threadpool(
        cache.respond, request, state.cache, key, build, store=known, replay=known
    )


def _candidate_page(
    request: Request, state: Any, name: str, parsed: Any, refused: ApiError | None
) -> Response:
    parts = PageParts("candidate")
    try:
        if refused is not None:
            raise refused
        if parsed is None:
            cand, pub = services.get_candidate_object(state, name)
            plot = parts.build("the plot of f and f'", lambda: services.candidate_plot(cand), None)
        else:
            cand, pub, plot = parsed
    except ApiError as exc:
        if exc.status_code not in (404, 422):
            raise
        results = parts.build(
            "its results across proxies", lambda: reads.candidate_results(state, name), []
        )
        if not results and not parts.notices:
            raise
        parts.note(
            f"This name resolves to no catalog function, formula or stored candidate "
            f"({exc.message}); what was stored under it is shown."
        )
        unresolved = {"name": name, "source": "unresolved", "properties": {}}
        return _render(
            request,
            "candidate.html",
            notices=parts.notices,
            candidate=unresolved,
            figure=None,
            results=results,
            prescreen=None,
        )
    figure = None
    if plot is not None:
        figure = parts.build(
            "the plot of f and f'",
            lambda: plots.to_div(
                plots.function_figure(plot.u, plot.f, plot.df, pub.name), "fn-figure"
            ),
            None,
        )
    results, derived = parts.build(
        "its results across proxies",
        lambda: reads.candidate_rows(state, pub.name, pub.fingerprint),
        ([], []),
    )
    unreadable = list(pub.unreadable)
    prescreen = parts.build(
        "its prescreen",
        lambda: prescreens.status(
            state, state.repo.get_candidate(pub.name), pub.fingerprint, unreadable
        ),
        None,
    )
    for what in unreadable:
        parts.note(f"Could not read this candidate's stored {what}; it is shown empty.")
    return _render(
        request,
        "candidate.html",
        notices=parts.notices,
        candidate=pub,
        figure=figure,
        results=results,
        derived=derived,
        prescreen=prescreen,
    )


@router.get("/studies", response_class=HTMLResponse, name="page_studies")
def page_studies(
    request: Request,
    state: StateDep,
    _reader: Reader,
    tag: Annotated[str | None, Query(max_length=40)] = None,
    archived: bool = False,
) -> Response:
    """The studies, with their tags and notes; ``?tag=`` filters, ``?archived=true`` shows
    archived ones too."""
    parts = PageParts("studies")
    studies = parts.build(
        "the studies",
        lambda: services.list_studies(state, tag=tag or None, archived=archived).items,
        [],
    )
    return _render(
        request, "studies.html", notices=parts.notices, studies=studies, tag=tag, archived=archived
    )


def _study_figure(detail: Any) -> Any:
    """The objective against the axis the study's kind names (a property study's transform),
    one curve per function; else the cells side by side."""
    from normfree.specs import StudySpec
    from normfree.workers import kinds

    cells = [c.model_dump() for c in detail.cells if not c.baseline]
    try:
        axis = kinds.get(detail.kind).figure_axis(StudySpec.model_validate(detail.spec))
    except ValueError:  # an unreadable stored spec or kind: the cells side by side
        axis = None
    if axis:
        refs = [c.model_dump() for c in detail.cells if c.baseline]
        return plots.study_figure(cells, detail.objective, axis, refs)
    return plots.options_figure([c.model_dump() for c in detail.cells], detail.objective)


@router.get("/studies/{study_id}", response_class=HTMLResponse, name="page_study")
async def page_study(
    request: Request, state: StateDep, _reader: Reader, study_id: IdPath
) -> Response:
    """A study's picture (metric vs transform value per base function), cells and progress; the
    trial table loads a page at a time from ``/api/studies/{id}/trials``. Cached like the
    study's summary."""

    async def current_key() -> reads.Key:
        error = state.runner.errors.get(study_id) if state.runner else None
        study = await reads.small_read(state, reads.study_key, state, study_id)
        return reads.derived("page-study", study, str(request.base_url), error)

    key = await current_key()
    error = key[0][-1]

    def build() -> cache.Cached:
        parts = PageParts("study")
        detail = parts.build(
            "the study's cells", lambda: reads.study_summary(state, study_id, key), None
        )
        if detail is None:
            detail = services.study_without_cells(state, study_id)
        for what in detail.unreadable:
            parts.note(f"Could not read this study's stored {what}; it is shown empty.")
        figure = None
        if any(c.n for c in detail.cells):
            figure = parts.build(
                "the study's plot",
                lambda: plots.to_div(_study_figure(detail), "study-figure"),
                None,
            )
        elif detail.progress.finished:
            parts.note("No plot: no trial of this study completed (why, per arm, is below).")
        if figure is None and detail.progress.state in LIVE_STATUSES:
            # an empty div the live view draws into as soon as a cell finishes
            figure = '<div id="study-figure"><p class="muted">No cell has finished yet.</p></div>'
        importance = None
        if detail.generate is not None:
            gen = detail.generate
            importance = parts.build(
                "the property importance plot",
                lambda: plots.to_div(
                    plots.importance_figure(gen.get("importance")), "importance-figure"
                ),
                None,
            )
        live = detail.progress.state in LIVE_STATUSES
        # the study's own fidelity: it reads only this study's trials (and the built-in set),
        # so the page's version key still covers it; the proxy's is one link away
        study_fidelity = parts.build(
            "the study's fidelity", lambda: lines.study_line(state, study_id), None
        )
        return cache.html_body(
            _render(
                request,
                "study.html",
                notices=parts.notices,
                study=detail,
                figure=figure,
                importance=importance,
                live=live,
                error=error,
                study_fidelity=study_fidelity,
                proxy_fidelity_url=fidelity.page_url(detail.proxy, None),
            )
        )

    # a driver's error lives in this process only: such a page is never replayed
    replay = error is None and not reads.driven(key)
    return await cache.serve(request, state.cache, key, build, replay=replay, rekey=current_key)


@router.get("/studies/{study_id}/figure.json", name="page_study_figure")
async def page_study_figure(
    request: Request, state: StateDep, _reader: Reader, study_id: IdPath
) -> Response:
    """The study figure as plotly JSON, for the page's live refresh."""

    def build() -> cache.Cached:
        fig = _study_figure(reads.study_summary(state, study_id, key))
        return cache.Cached(plots.to_json(fig).encode(), "application/json")

    key = reads.derived(
        "study-figure", await reads.small_read(state, reads.study_key, state, study_id)
    )
    return await cache.serve(request, state.cache, key, build, replay=not reads.driven(key))


@router.get("/trials/{trial_id}", response_class=HTMLResponse, name="page_trial")
async def page_trial(
    request: Request, state: StateDep, _reader: Reader, trial_id: IdPath
) -> Response:
    """Learning curves, alpha vs 1/std per layer, gamma and residual-branch norms per layer."""

    def answer() -> Response:
        # the trial and its key in one read, as its JSON (routers.trials): never stored
        trial_key, trial = reads.trial_read(state, trial_id)
        key = reads.derived("page-trial", trial_key, str(request.base_url))
        return cache.respond(
            request, state.cache, key, lambda: _trial_page(request, trial), store=False
        )

    return await run_in_threadpool(answer)


def _trial_page(request: Request, stored: dict[str, Any]) -> cache.Cached:
    parts = PageParts("trial")
    trial = parts.build(
        "the trial's curves and diagnostics", lambda: services.trial_public(stored), None
    )
    if trial is None:  # what is left without them (a corrupt curve or diagnostic)
        trial = services.trial_public({**stored, "curves": [], "diagnostics": []})
    for what in trial.unreadable:
        parts.note(f"Could not read this trial's stored {what}; it is shown empty.")
    curves = [c.model_dump() for c in trial.curves]
    diags = [d.model_dump() for d in trial.diagnostics]
    figures = []
    if curves:
        figures.append(
            parts.build(
                "the learning curves",
                lambda: plots.to_div(plots.curves_figure(curves), "curves-figure"),
                None,
            )
        )
    if diags:
        for what, make, div in (
            ("alpha vs 1/std", plots.alpha_figure, "alpha-figure"),
            ("the per-layer norms", plots.layers_figure, "layers-figure"),
        ):
            figures.append(parts.build(what, lambda m=make, d=div: plots.to_div(m(diags), d), None))
    figures = [f for f in figures if f is not None]
    return cache.html_body(
        _render(request, "trial.html", notices=parts.notices, trial=trial, figures=figures)
    )


@router.get("/fidelity", response_class=HTMLResponse, name="page_fidelity")
async def page_fidelity(
    request: Request,
    state: StateDep,
    _reader: Reader,
    proxy: Annotated[str | None, Query(max_length=100)] = None,
    study_id: StudyIdQuery = None,
    reference: Annotated[str, Query(max_length=100)] = "published",
) -> Response:
    """A proxy's (or study's) fidelity to a reference set: per setting, proxy vs reference
    scatter, rank correlations with bootstrap intervals, published orders, failures.
    The report is computed in a worker process (``api.offload``), never on the loop."""
    proxies = await run_in_threadpool(services.proxies_with_results, state)
    if study_id is None and not proxy:
        proxy = proxies[0] if proxies else None
    report = None
    if proxy or study_id is not None:
        report = await fidelity.report_off_loop(
            request,
            state,
            proxy=None if study_id is not None else proxy,
            study_id=study_id,
            reference=reference,
        )
    return await run_in_threadpool(
        _fidelity_page, request, state, report, proxy, study_id, proxies, reference
    )


def _fidelity_page(
    request: Request,
    state: Any,
    report: Any,
    proxy: str | None,
    study_id: int | None,
    proxies: list[str],
    reference: str,
) -> Response:
    parts = PageParts("fidelity")
    references = parts.build(
        "the reference sets",
        lambda: [r.name for r in fidelity.list_references(state).items],
        [reference],
    )
    figures: list[str] = []
    if report is not None:
        for i, setting in enumerate(report.settings):
            figures.append(
                parts.build(
                    f"the plot of setting {i + 1}",
                    lambda s=setting, i=i: plots.to_div(
                        plots.fidelity_figure(s), f"fidelity-figure-{i}"
                    ),
                    "",
                )
            )
    return _render(
        request,
        "fidelity.html",
        notices=parts.notices,
        report=report,
        figures=figures,
        proxy=proxy,
        study_id=study_id,
        proxies=proxies,
        reference=reference,
        references=references,
    )


@router.get("/submit", response_class=HTMLResponse, name="page_submit")
def page_submit(request: Request, _reader: Reader) -> Response:
    return _render(request, "submit.html", form={}, result=None, error=None)


@router.post("/submit", response_class=HTMLResponse, name="page_submit_post")
async def page_submit_post(
    request: Request,
    state: StateDep,
    name: Annotated[str, Form(max_length=200)] = "",
    formula: Annotated[str, Form(max_length=2000)] = "",
    description: Annotated[str, Form(max_length=4000)] = "",
    token: Annotated[str, Form(max_length=300)] = "",
) -> Response:
    """The form's write: same token rule and same service code as ``POST /api/candidates``."""
    form = {"name": name, "formula": formula, "description": description}
    try:
        data = CandidateCreate(name=name, formula=formula, description=description.strip() or None)
        who = await run_in_threadpool(check_principal, state, token.strip() or None)
        parsed = await candidates.parsed_submission(request, state, data, who.name)
        result = await run_in_threadpool(
            lambda: services.submit_candidate(
                state, data, submitter=who.name, parsed=parsed, owner_token_id=who.id
            )
        )
    except ValidationError as exc:
        msg = describe_validation([dict(e) for e in exc.errors()])
        return _render(request, "submit.html", 422, form=form, result=None, error=msg)
    except ApiError as exc:
        return _render(
            request,
            "submit.html",
            exc.status_code,
            form=form,
            result=None,
            error=exc.message,
            token_refused=exc.status_code in (401, 403),  # the page's script forgets it
        )

    def page() -> Response:
        figure = None
        cand = None
        with contextlib.suppress(ApiError):
            cand, _ = services.get_candidate_object(state, result.duplicate_of or result.name)
        if cand is not None:
            plot = services.candidate_plot(cand)
            if plot is not None:
                figure = plots.to_div(
                    plots.function_figure(plot.u, plot.f, plot.df, result.name), "fn-figure"
                )
        status = 201 if result.created else 200
        return _render(
            request, "submit.html", status, form={}, result=result, error=None, figure=figure
        )

    return await run_in_threadpool(page)
