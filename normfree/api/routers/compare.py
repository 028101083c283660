"""Comparing runs and looking into a search: ``/compare`` (learning curves of chosen trials or
a study's arms on one plot) and ``/studies/{id}/search`` (a search's history, importance and
pruning timeline), each with its JSON twin under ``/api``, built by the same service
(:mod:`normfree.api.compare`, :mod:`normfree.api.search`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from normfree.api import cache, comparison_plots, plots, reads, search_importance
from normfree.api.compare import Comparison, compare, compare_key
from normfree.api.deps import MAX_ID, IdPath, Reader, StateDep
from normfree.api.errors import ErrorBody
from normfree.api.search import MAX_LIMIT, SearchView, page_of, search_view

api_router = APIRouter()
page_router = APIRouter(include_in_schema=False)

TrialsQuery = Annotated[
    list[str] | None,
    Query(
        max_length=400,
        description="Trial ids, comma-separated or repeated (at most 20): `trials=3,7,12`.",
    ),
]
ArmsQuery = Annotated[
    list[str] | None,
    Query(
        alias="arm",
        max_length=300,
        description="With `study`: an arm's label as the study's cells spell it "
        "(`erf`, `erf @ 0.5`, `erf [alpha0=1]`), repeated (at most 12).",
    ),
]
ArmListQuery = Annotated[
    str | None,
    Query(
        alias="arms",
        max_length=2000,
        description="With `study`: arm labels in one comma list (commas inside () and [] kept).",
    ),
]
MetricQuery = Annotated[
    str | None,
    Query(max_length=100, description="The metric to overlay (default: the objective)."),
]
StudyQuery = Annotated[
    int | None, Query(ge=1, le=MAX_ID, description="A study, whose arms `arm` names.")
]


@dataclass(frozen=True)
class Choice:
    """What a comparison names, as ``compare`` and ``compare_key`` take it: one query for the
    JSON route and its page, so the two read ``trials``, ``study`` and the arms the same way."""

    trials: list[str] | None
    study_id: int | None
    arms: list[str]
    metric: str | None

    def kwargs(self) -> dict[str, Any]:
        return asdict(self)


async def _choice(
    trials: TrialsQuery = None,
    study: StudyQuery = None,
    arm: ArmsQuery = None,
    arms: ArmListQuery = None,
    metric: MetricQuery = None,
) -> Choice:
    return Choice(trials, study, [*(arm or []), *([arms] if arms else [])], metric)


# ``async``: it does no I/O, and a plain ``def`` dependency costs a thread-pool hand-off (deps)
ChoiceDep = Annotated[Choice, Depends(_choice)]


@api_router.get(
    "/compare",
    response_model=Comparison,
    summary="Compare learning curves",
    tags=["trials"],
    responses={404: {"model": ErrorBody}},
)
def get_compare(state: StateDep, _reader: Reader, choice: ChoiceDep) -> Comparison:
    """Learning curves of chosen trials (`trials=3,7,12`) or of a study's arms
    (`study=4&arm=erf&arm=tanh`: every seed of each arm), for one plot: each trial's curve
    points, the metrics they hold and the one chosen (`metric`, default the objective). Cached
    per choice and the state of its trials (a new curve point builds it again)."""
    key = compare_key(state, **choice.kwargs())
    return state.cache.get_or_build(key, lambda: compare(state, **choice.kwargs()))


@api_router.get(
    "/studies/{study_id}/search",
    response_model=SearchView,
    summary="Search view: history, importance, pruning",
    tags=["studies"],
    responses={404: {"model": ErrorBody}},
)
async def get_search(
    request: Request,
    state: StateDep,
    _reader: Reader,
    study_id: IdPath,
    cursor: Annotated[
        int, Query(ge=0, le=MAX_ID, description="Trials after this `order` (a `next_cursor`).")
    ] = 0,
    limit: Annotated[
        int, Query(ge=1, le=MAX_LIMIT, description="Trials per page (default 100).")
    ] = 100,
) -> Response:
    """A search or generate study's optimisation history (objective per trial in Optuna's ask
    order, best so far), property importance and pruning timeline (epochs each trial ran; the
    epoch a pruned one stopped at). 404 for other kinds. The trials come in pages of `limit`
    in ask order: `next_cursor` is the `cursor` of the next page (null on the last);
    `total_trials` counts them all, and the counts, best trial, importance and top arms are
    over all of them. The importance is the one stored when the latest trial finished;
    `importance_stale` says it lags the trials (a refresh then runs in the background). Cached
    like the study's summary (an ETag that changes when a trial finishes)."""
    study = await reads.small_read(state, reads.study_key, state, study_id)
    key = reads.derived(
        "search-view", study, search_importance.mark(state, study_id), cursor, limit
    )
    return await cache.serve(
        request,
        state.cache,
        key,
        lambda: cache.json_body(page_of(search_view(state, study_id), cursor, limit)),
        replay=not reads.driven(key),
    )


def _render(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    templates = request.app.state.templates
    return templates.TemplateResponse(request, name, context, status_code=status_code)


@page_router.get("/compare", response_class=HTMLResponse, name="page_compare")
async def page_compare(
    request: Request, state: StateDep, _reader: Reader, choice: ChoiceDep
) -> Response:
    """The chosen curves on one plot, a metric selector and the trials drawn. With nothing
    chosen: how to choose (a form for trial ids; the study pages link arms here)."""
    if not choice.trials and choice.study_id is None:
        return _render(request, "compare.html", comparison=None, figure=None, notices=[])

    def build() -> cache.Cached:
        result = compare(state, **choice.kwargs())
        data = result.model_dump(mode="json")
        figure = None
        notices: list[str] = []
        if result.metric is None:
            notices.append("None of the chosen trials has reported an epoch yet: no curve.")
        else:
            figure = plots.to_div(comparison_plots.compare_figure(data), "compare-figure")
        return cache.html_body(
            _render(
                request,
                "compare.html",
                comparison=result,
                figure=figure,
                notices=notices,
                trials_text=",".join(str(t.id) for t in result.trials) if choice.trials else "",
                arms=choice.arms,
            )
        )

    key = await run_in_threadpool(compare_key, state, **choice.kwargs())
    page_key = ((*key[0], "page", str(request.base_url)), key[1])
    return await cache.serve(request, state.cache, page_key, build)


@page_router.get("/studies/{study_id}/search", response_class=HTMLResponse, name="page_search")
async def page_search(
    request: Request, state: StateDep, _reader: Reader, study_id: IdPath
) -> Response:
    """A search's optimisation history, property importance and pruning timeline; cached
    like the study page (built again when a trial finishes or the study changes state)."""
    study = await reads.small_read(state, reads.study_key, state, study_id)
    key = reads.derived(
        "page-search", study, str(request.base_url), search_importance.mark(state, study_id)
    )

    def build() -> cache.Cached:
        view = search_view(state, study_id)
        data = view.model_dump(mode="json")
        figures: dict[str, str | None] = {"history": None, "importance": None, "pruning": None}
        notices: list[str] = []
        if any(t["value"] is not None or t["last_value"] is not None for t in data["trials"]):
            figures["history"] = plots.to_div(
                comparison_plots.history_figure(data), "history-figure"
            )
        else:
            notices.append("No trial has a result yet: the history starts with the first.")
        if data["importance"] and data["importance"].get("features"):
            figures["importance"] = plots.to_div(
                plots.importance_figure(data["importance"]), "importance-figure"
            )
        if any(t["epochs_run"] for t in data["trials"]):
            figures["pruning"] = plots.to_div(
                comparison_plots.pruning_figure(data["trials"]), "pruning-figure"
            )
        return cache.html_body(
            _render(request, "search.html", view=view, figures=figures, notices=notices)
        )

    return await cache.serve(request, state.cache, key, build, replay=not reads.driven(key))
