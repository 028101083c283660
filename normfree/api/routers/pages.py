"""The dashboard: server-rendered jinja2 pages with plotly figures.

Every page is built from the same service calls as the JSON API (so a page shows what
``/api/...`` answers), and every figure from :mod:`normfree.api.plots`. The pages follow the
read rule of the API (public unless ``public_reads`` is off; then they answer 401, since a browser
page cannot send a bearer token). The submit form carries a token field and checks it with the
same rule as ``POST /api/candidates`` (see :mod:`normfree.api.deps`).
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from normfree.api import cache, fidelity, plots, prescreens, reads, services
from normfree.api.deps import (
    GroupQuery,
    IdPath,
    PropertyQuery,
    Reader,
    StateDep,
    StudyIdQuery,
    check_token,
)
from normfree.api.errors import ApiError, describe_validation
from normfree.api.routers import candidates
from normfree.api.schemas import CandidateCreate

router = APIRouter(include_in_schema=False)


# Properties shown as badges, in this order, when the candidate has them (flattened names).
_BADGE_ORDER = ("zero_centred", "odd", "bounded", "monotone", "smooth", "differentiable")


def _badges(props: dict[str, Any] | None) -> list[dict[str, str]]:
    """Short badges for a candidate's properties: true flags, and the growth/monotone kind."""
    flat = services.property_flags(props)
    out: list[dict[str, str]] = []
    seen: set[str] = set()

    def short(key: str) -> str:
        return key.rsplit(".", 1)[-1]

    keys = sorted(
        flat,
        key=lambda k: (
            _BADGE_ORDER.index(short(k)) if short(k) in _BADGE_ORDER else len(_BADGE_ORDER),
            k,
        ),
    )
    for key in keys:
        value = flat[key]
        label = short(key).replace("_", " ")
        if label in seen:
            continue
        if value is True:
            out.append({"label": label, "cls": "", "title": f"{key} = true"})
            seen.add(label)
        elif isinstance(value, str) and value and short(key) in ("monotone", "growth", "kind"):
            out.append({"label": f"{label}: {value}", "cls": "no", "title": key})
            seen.add(label)
        if len(out) >= 6:
            break
    return out


def install_filters(templates: Jinja2Templates) -> None:
    templates.env.filters["property_badges"] = _badges


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
) -> Response:
    """The leaderboard of one proxy (default: the first with results); cached like its JSON."""
    wanted = [p for p in properties or [] if p]

    def keys() -> tuple[list[str], str | None, reads.Key | None, reads.Key]:
        proxies = services.proxies_with_results(state)
        shown = proxy or (proxies[0] if proxies else None)
        lb_key = reads.leaderboard_key(state, shown, group or None, wanted) if shown else None
        family = ("page-leaderboard", str(request.base_url), shown, group, tuple(wanted))
        versions = (tuple(proxies), lb_key[1] if lb_key else None, reads.candidates_key(state)[1])
        return proxies, shown, lb_key, (family, versions)

    proxies, proxy, lb_key, key = await reads.small_read(state, keys)

    def build() -> cache.Cached:
        board = None
        figure = None
        if proxy:
            board = reads.leaderboard(
                state, proxy, group=group or None, properties=wanted, key=lb_key
            )
            if board.rows:
                rows = [r.model_dump() for r in board.rows]
                figure = plots.to_div(plots.leaderboard_figure(rows, board.objective), "lb-figure")
        groups = sorted({c.group for c in reads.candidates(state).items if c.group})
        return cache.html_body(
            _render(
                request,
                "leaderboard.html",
                board=board,
                proxy=proxy,
                proxies=proxies,
                group=group,
                groups=groups,
                properties=properties or [],
                figure=figure,
            )
        )

    return await cache.serve(request, state.cache, key, build)


@router.get("/candidates", response_class=HTMLResponse, name="page_candidates")
def page_candidates(
    request: Request,
    state: StateDep,
    _reader: Reader,
    group: GroupQuery = None,
    properties: PropertyQuery = None,
) -> Response:
    listing = reads.candidates(
        state, group=group or None, properties=[p for p in properties or [] if p]
    )
    return _render(request, "candidates.html", listing=listing, group=group)


@router.get("/candidates/{name}", response_class=HTMLResponse, name="page_candidate")
async def page_candidate(
    request: Request, state: StateDep, _reader: Reader, name: Annotated[str, Path(max_length=300)]
) -> Response:
    """f and f', properties, prescreen (for stored submissions) and results across proxies.
    A name that must be parsed is parsed in a worker process, as for the API's read."""
    parsed = await candidates.parsed_name(request, state, name)

    def page() -> Response:
        if parsed is None:
            cand, pub = services.get_candidate_object(state, name)
            plot = services.candidate_plot(cand)
        else:
            _cand, pub, plot = parsed
        figure = None
        if plot is not None:
            figure = plots.to_div(
                plots.function_figure(plot.u, plot.f, plot.df, pub.name), "fn-figure"
            )
        results = reads.candidate_results(state, pub.name, pub.fingerprint)
        return _render(
            request,
            "candidate.html",
            candidate=pub,
            figure=figure,
            results=results,
            prescreen=prescreens.status(state, state.repo.get_candidate(pub.name), pub.fingerprint),
        )

    return await run_in_threadpool(page)


@router.get("/studies", response_class=HTMLResponse, name="page_studies")
def page_studies(request: Request, state: StateDep, _reader: Reader) -> Response:
    return _render(request, "studies.html", studies=services.list_studies(state).items)


def _study_figure(detail: Any) -> Any:
    cells = [c.model_dump() for c in detail.cells if not c.baseline]
    transform = detail.spec.get("transform")
    if detail.kind == "property" and transform:
        refs = [c.model_dump() for c in detail.cells if c.baseline]
        return plots.study_figure(cells, detail.objective, transform, refs)
    return plots.options_figure([c.model_dump() for c in detail.cells], detail.objective)


@router.get("/studies/{study_id}", response_class=HTMLResponse, name="page_study")
async def page_study(
    request: Request, state: StateDep, _reader: Reader, study_id: IdPath
) -> Response:
    """A study's picture (metric vs transform value per base function), cells and progress; the
    trial table loads a page at a time from ``/api/studies/{id}/trials``. Cached like the
    study's summary."""
    error = state.runner.errors.get(study_id) if state.runner else None
    study = await reads.small_read(state, reads.study_key, state, study_id)
    key = reads.derived("page-study", study, str(request.base_url), error)

    def build() -> cache.Cached:
        detail = services.get_study(state, study_id, trials=False)
        figure = plots.to_div(_study_figure(detail), "study-figure")
        importance = None
        if detail.generate is not None:
            fig = plots.importance_figure(detail.generate.get("importance"))
            importance = plots.to_div(fig, "importance-figure")
        live = detail.status in ("pending", "running", "paused")
        # the study's own fidelity: it reads only this study's trials (and the built-in set),
        # so the page's version key still covers it; the proxy's is one link away
        study_fidelity = fidelity.summary(state, study_id=study_id)
        return cache.html_body(
            _render(
                request,
                "study.html",
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
    return await cache.serve(request, state.cache, key, build, replay=replay)


@router.get("/studies/{study_id}/figure.json", name="page_study_figure")
async def page_study_figure(
    request: Request, state: StateDep, _reader: Reader, study_id: IdPath
) -> Response:
    """The study figure as plotly JSON, for the page's live refresh."""

    def build() -> cache.Cached:
        fig = _study_figure(services.get_study(state, study_id, trials=False))
        return cache.Cached(fig.to_json().encode(), "application/json")

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
    trial = services.trial_public(stored)
    curves = [c.model_dump() for c in trial.curves]
    diags = [d.model_dump() for d in trial.diagnostics]
    figures = []
    if curves:
        figures.append(plots.to_div(plots.curves_figure(curves), "curves-figure"))
    if diags:
        figures.append(plots.to_div(plots.alpha_figure(diags), "alpha-figure"))
        figures.append(plots.to_div(plots.layers_figure(diags), "layers-figure"))
    return cache.html_body(_render(request, "trial.html", trial=trial, figures=figures))


@router.get("/fidelity", response_class=HTMLResponse, name="page_fidelity")
def page_fidelity(
    request: Request,
    state: StateDep,
    _reader: Reader,
    proxy: Annotated[str | None, Query(max_length=100)] = None,
    study_id: StudyIdQuery = None,
    reference: Annotated[str, Query(max_length=100)] = "published",
) -> Response:
    """A proxy's (or study's) fidelity to a reference set: per setting, proxy vs reference
    scatter, rank correlations with bootstrap intervals, published orders, failures."""
    proxies = services.proxies_with_results(state)
    references = [r.name for r in fidelity.list_references(state).items]
    if study_id is None and not proxy:
        proxy = proxies[0] if proxies else None
    report = None
    figures: list[str] = []
    if proxy or study_id is not None:
        report = fidelity.report(
            state, proxy=None if study_id is not None else proxy, study_id=study_id,
            reference=reference,
        )  # fmt: skip
        for i, setting in enumerate(report.settings):
            figures.append(plots.to_div(plots.fidelity_figure(setting), f"fidelity-figure-{i}"))
    return _render(
        request,
        "fidelity.html",
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
        who = await run_in_threadpool(check_token, state, token.strip() or None)
        parsed = await candidates.parsed_submission(request, state, data)
        result = await run_in_threadpool(
            lambda: services.submit_candidate(state, data, submitter=who, parsed=parsed)
        )
    except ValidationError as exc:
        msg = describe_validation([dict(e) for e in exc.errors()])
        return _render(request, "submit.html", 422, form=form, result=None, error=msg)
    except ApiError as exc:
        return _render(
            request, "submit.html", exc.status_code, form=form, result=None, error=exc.message
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
