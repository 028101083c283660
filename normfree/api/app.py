"""The FastAPI application factory: one engine, one repository, one router per resource.

``create_app(settings)`` builds everything from a :class:`~normfree.settings.Settings`, so tests
make an app over their own database and ``normfree serve`` makes one over the configured one. The
app holds (on ``app.state``) the :class:`~normfree.storage.Database`, the repository, the jinja2
templates and the background study runner; routers reach them only through :mod:`.deps`.

Static files: the dashboard's own CSS/JS from ``normfree/api/static`` and ``plotly.min.js`` from the
installed plotly package (``/vendor/plotly.min.js``), so pages render with no network at all;
``/docs`` likewise loads Swagger UI from ``static/swagger-ui`` (there is no ``/redoc``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import plotly
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from normfree import __version__
from normfree.api import budget, errors, fastlane, inputs, offload, security
from normfree.settings import Settings, get_settings

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
# Swagger UI's files, committed under static/ (swagger-ui-dist; licence and version beside them)
SWAGGER_UI = "/static/swagger-ui/"

API_DESCRIPTION = """\
normfree measures whether a pointwise function f can replace LayerNorm in a transformer.

* **Reads** (GET) are public unless the server sets `NORMFREE_PUBLIC_READS=false`.
* **Writes** (POST, DELETE) need `Authorization: Bearer <token>`; create a token with
  `normfree token create NAME [--scope read|write|admin]` (only its hash is stored) and revoke
  it with `normfree token revoke NAME`. A missing token answers 401; an unknown, revoked,
  expired or read-only one 403.
* A study or reference set belongs to the token that created it: only that token or an admin
  token may pause, resume, cancel, replace or delete it (403 otherwise). A study is deleted
  only when cancelled, complete or failed (409 otherwise).
* Every refused request answers `{"error": code, "message": what to fix, "detail": ...}` with a
  4xx status; bodies over `NORMFREE_MAX_REQUEST_BYTES` answer 413.
"""

TAGS = [
    {"name": "candidates", "description": "Norm functions f(u): submit, list, inspect."},
    {"name": "studies", "description": "Property studies, option studies and function searches."},
    {"name": "trials", "description": "One training run with its curves and diagnostics."},
    {"name": "leaderboards", "description": "Candidates ranked per proxy, over seeds, with CIs."},
    {"name": "references", "description": "Published at-scale results to judge proxies by."},
    {"name": "fidelity", "description": "How far a proxy's ranking predicts the references."},
    {"name": "health", "description": "Liveness and version."},
]


def create_app(
    settings: Settings | None = None,
    *,
    run_studies: bool | None = None,
    migrate: bool = True,
    prescreen: bool = True,
    freeze_heap: bool = False,
    announced_url: str | None = None,
) -> FastAPI:
    """Build the API and dashboard over ``settings`` (default: the process settings).

    ``run_studies``: start studies created through the API in a background runner inside this
    process (the embedded default of ``normfree serve``; ``None`` means on). Tests that only want
    rows pass ``False``. ``migrate`` upgrades the schema at start (Alembic, idempotent).
    ``prescreen=False`` skips the zero-cost prescreen of submissions (fuzzing only: it costs
    seconds per new formula). ``freeze_heap`` takes the long-lived heap out of the garbage
    collector's scans after the warm-up (``services.freeze_long_lived``): for a server
    process, not for tests that build many apps in one process. ``announced_url``: the URL
    ``normfree serve`` printed; a server requests its recent studies' pages from it once warm
    (:func:`warm_pages`).
    """
    # torch is imported here, in the thread that builds the app, before any background thread
    # (warm-up, enrichment, prescreens) can: its import is not thread-safe (two threads racing
    # through it fail with "operator prims::... does not exist"), and it runs TorchScript's
    # ast.parse, which on CPython 3.11 corrupts a concurrent ast.parse in another thread
    # ("AST constructor recursion depth mismatch", CPython gh-106905). The server needs torch
    # for prescreens anyway; the CLI's quick commands never build the app.
    import torch  # noqa: F401

    # The same for the two digests taken by walking source files with ast.parse (the trainer's
    # code version, which a study's creation reads for reuse, and the kernel generator's, part
    # of the kernel cache's key): taken here, once per process, so that no request thread
    # parses while a prescreen's TorchScript does (a study's creation failed with that error
    # in CI on 2026-12-04, in a real-browser test that had just submitted a formula).
    import normfree.kernels._codegen  # noqa: F401
    from normfree.workers.versions import trainer_version

    trainer_version()

    from normfree.api import services
    from normfree.api.routers import (
        candidates,
        compare,
        fidelity,
        health,
        leaderboards,
        pages,
        references,
        screens,
        studies,
        trials,
    )

    settings = settings or get_settings()
    if freeze_heap:  # a server process (``normfree serve``)
        services.FREEZE_HEAP.set()
        sys.setswitchinterval(settings.gil_switch_interval_s)
    state = services.ServiceState.open(
        settings, migrate=migrate, run_studies=run_studies, prescreen=prescreen
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        import anyio
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        state.quick_limiter = anyio.CapacityLimiter(settings.quick_threads)
        state.read_limiter = anyio.CapacityLimiter(settings.server_read_threads)
        if state.db.is_postgres:
            from normfree.storage.async_reads import AsyncTrialDocuments

            state.trial_documents = AsyncTrialDocuments(
                state.db.url, size=settings.server_read_threads
            )
        app.state.offload.open()  # a lifespan may run again after a close (test clients)
        if freeze_heap:  # a server process: its worker processes start now, not on first use
            app.state.offload.start()
            # the catalog, the function analyses and the fidelity lines are computed there
            offload.start_background()
        # The catalog and the analyses (sympy, seconds) before the first request needs them:
        # fetched from the background worker in a server, built here otherwise.
        builder = app.state.builder = _builder_for(state, settings) if freeze_heap else None
        threading.Thread(
            target=_warm_up,
            args=(state, freeze_heap, builder, announced_url if settings.public_reads else None),
            name="normfree-warm-up",
            daemon=True,
        ).start()
        if state.prescreen:
            # prescreens a killed server left pending (parsing: off the event loop)
            threading.Thread(
                target=_quietly(prescreens.requeue_interrupted),
                args=(state,),
                name="normfree-prescreen-requeue",
                daemon=True,
            ).start()
        try:
            yield
        finally:
            if lane is not None:
                await lane.aclose()
            if state.trial_documents is not None:
                await state.trial_documents.aclose()
            app.state.offload.close()
            if builder is not None:
                state.cache.remote = None
                builder.close()
            if freeze_heap:
                offload.close_background(final=True)
            state.close()

    app = FastAPI(
        title="normfree",
        version=__version__,
        description=API_DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
        # /docs is ours (below): Swagger UI from the package, not a CDN; ReDoc has no bundle
        docs_url=None,
        redoc_url=None,
        responses={
            413: {"model": errors.ErrorBody, "description": "Request body too large."},
            422: {"model": errors.ErrorBody, "description": "Invalid request: see message."},
        },
    )
    app.state.settings = settings
    app.state.builder = None  # a server's read builder (api.builder), from its start
    app.state.services = state
    app.state.templates = Jinja2Templates(directory=str(HERE / "templates"))
    # The templates ship in the package: a render need not stat its files for changes (3% of
    # a board page's rebuild under a writer); edit a template, restart the server.
    app.state.templates.env.auto_reload = False
    pages.install_filters(app.state.templates)
    if freeze_heap:
        _preload_reads(app.state.templates)

    errors.install_error_handlers(app)
    # Inside the body limit (it buffers a bounded body), outside every route (api.inputs).
    app.add_middleware(inputs.InputGuard)
    app.add_middleware(errors.BodyLimitMiddleware, max_bytes=settings.max_request_bytes)
    # Outermost: the headers reach every answer, the body limit's 413 included.
    app.add_middleware(security.SecurityHeadersMiddleware)
    app.state.parse_limiter = security.RateLimiter(settings.anonymous_parses_per_minute)
    app.state.token_budget = budget.TokenBudget(settings.max_token_trial_seconds)
    app.state.offload = offload.OffloadPool(
        settings.offload_workers, settings.offload_seconds, settings.offload_queue_per_client
    )
    # Outside even the security headers: it replays answers as they were finally sent.
    from normfree.api import prescreens, search_importance
    from normfree.api.lines import LINES

    lane = fastlane.generation_for(state.db.url) if settings.fast_lane else None
    app.add_middleware(
        fastlane.FastLane,
        generation=lane,
        # what answers show beside the database: analyses done, this process's prescreens and
        # fidelity lines, importance refreshes (a search's importance lives beside our database)
        local=lambda: (
            services.ENRICHER.epoch,
            prescreens.epoch(),
            LINES.epoch,
            search_importance.epoch(),
        ),
        enabled=lambda: settings.public_reads,
        direct=[(re.compile("/api" + trials.DIRECT_PATH.pattern), _secured(trials.direct))]
        if settings.fast_lane
        else [],
    )

    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    @app.get("/vendor/plotly.min.js", include_in_schema=False, name="plotly_js")
    def plotly_js() -> FileResponse:
        """plotly.js from the installed plotly package (cached by browsers for a day)."""
        return FileResponse(
            PLOTLY_JS,
            media_type="application/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @app.get("/docs", include_in_schema=False, name="swagger_ui")
    def swagger_ui(request: Request) -> HTMLResponse:
        """The API's Swagger UI from the package's own copy (``static/swagger-ui``): it renders
        with no network, like every page here."""
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + (app.openapi_url or "/openapi.json"),
            title=f"{app.title} API",
            swagger_js_url=root + SWAGGER_UI + "swagger-ui-bundle.js",
            swagger_css_url=root + SWAGGER_UI + "swagger-ui.css",
            swagger_favicon_url=root + SWAGGER_UI + "favicon-32x32.png",
            # no validator badge: it is an image from swagger.io, a request off the machine
            swagger_ui_parameters={"validatorUrl": None},
        )

    routers = (health, candidates, studies, screens, trials, leaderboards, references, fidelity)
    for module in routers:
        app.include_router(module.router, prefix="/api")
    app.include_router(compare.api_router, prefix="/api")
    app.include_router(pages.router)
    app.include_router(compare.page_router)
    return app


def _builder_for(state: Any, settings: Settings) -> Any:
    """A server's read builder (``api.builder``), wired into its read cache, or None (off in
    the settings, or a database no other process can open)."""
    from normfree.api.builder import Builder
    from normfree.api.fidelity import _shared

    if not settings.read_builder or settings.read_stale_window_s <= 0 or not _shared(state.db.url):
        return None  # (no stale window: no family is ever hot, and nothing would be sent there)
    builder = Builder(settings)
    state.cache.remote = builder.build
    return builder


def _warm_up(
    state: Any, freeze_heap: bool, builder: Any = None, announced_url: str | None = None
) -> None:
    """The start's background warm-up. In a server: first the summaries of the studies updated
    last (:func:`warm_studies`, without their fidelity lines), then ``services.warm_up`` (the
    catalog and the function analyses, from the background worker; it freezes the heap at its
    end), then the read builder is scheduled, then the studies' lines and their pages
    (:func:`warm_pages`).

    Why the studies first: they need neither the catalog nor the analyses, and ``services.
    warm_up`` waits seconds for the background worker; with the studies after it, readers
    arriving in a start's first seconds built a dozen cold study summaries on as many threads
    at once, and every read waited for the GIL (32 readers from the first second, a study
    writing, 10k trials: p99 0.5-0.7 s in the first second, 0.12-0.2 s over the first five;
    bench/results/live_reads.md). What a fidelity line computed in this process would import
    is imported only when one is (``lines.preload_once``): as a step of every start it held
    this process's GIL for a second while readers waited, for a fallback (the background
    worker failed) that rarely runs."""
    from normfree.api import services

    if freeze_heap:
        warm_studies(state, with_lines=False)
    services.warm_up(state)
    if freeze_heap:
        services.freeze_long_lived()
    if builder is not None:
        from normfree.api.builder import START_AFTER_S

        builder.start(delay=START_AFTER_S)
    if freeze_heap:
        ids = warm_studies(state)  # (built above: now their lines)
        if announced_url:
            warm_pages(state, announced_url, ids)


# How many of the last updated studies a server builds at its start (``warm_studies``).
WARM_STUDIES = 16


def warm_studies(state: Any, limit: int = WARM_STUDIES, *, with_lines: bool = True) -> list[int]:
    """Build the summaries of the ``limit`` studies updated last into the read cache, so that
    their first readers after a start find them built. Why: a cold study's summary (its cells,
    their reliability bootstrap) cost 0.3-1.9 s at 10k trials on PostgreSQL, and 32 readers
    finding ten studies cold at once were the whole p99 of a start's first seconds
    (bench/results/live_reads.md). The JSON, the page and a page of trials share this build.
    Their fidelity lines too: a study page's first reader waited for its line (0.27 s against
    0.02 s with it done, at 10k trials on a 2-core host). A failure is logged and leaves that
    study to its first reader. The ids built. ``with_lines=False``: the summaries only (the
    read builder, which is sent its server's lines and computes none)."""
    from normfree.api import lines, reads
    from normfree.storage import reads as stored

    try:
        with state.db.read() as conn:
            ids = stored.recent_study_ids(conn, limit)
    except Exception:
        log.warning("study warm-up: no study list", exc_info=True)
        return []
    built = []
    for sid in ids:
        try:
            reads.study_summary(state, sid, reads.study_key(state, sid))
            if with_lines:
                lines.study_line(state, sid)  # (in a server: by its background worker)
            built.append(sid)
        except Exception:
            log.warning("study warm-up: study %s left to its first reader", sid, exc_info=True)
    return built


def warm_pages(state: Any, base_url: str, study_ids: list[int], wait_s: float = 60.0) -> int:
    """Ask this server, at the URL it announced, for each warmed study's JSON and page and for
    the home page, as their first readers would: how many answered 200 (in the last pass).

    Why: with the summaries built (:func:`warm_studies`), what 32 readers arriving at once
    still found cold was each study's own answers (its JSON with its first page of trials,
    ~10 ms, and its page, ~20 ms, which prints absolute links and so is built per host),
    twenty builds at once holding the GIL the event loop needed for every cached read: the
    window's first 0.8 s answered ~10% of its reads, p99 ~300 ms (bench/results/live_reads.md).
    Asked over HTTP, through the server itself, so what is kept is exactly what a reader at
    that URL gets. A fidelity line done after a study was asked moves its key (the answer
    showed the line before it), so the studies are asked again, up to three times, until
    their keys hold once the lines are done. Failures are logged: a reader builds what is
    missing, as before."""
    import httpx

    from normfree.api import reads
    from normfree.api.lines import LINES

    def keys() -> dict[int, Any]:
        return {sid: reads.study_key(state, sid) for sid in study_ids}

    def settle() -> None:
        while LINES.busy() and time.monotonic() < deadline:
            time.sleep(0.2)

    done = 0
    deadline = time.monotonic() + wait_s
    with httpx.Client(base_url=base_url, timeout=60.0) as client:
        while True:  # the warm-up may finish before the server listens
            try:
                client.get("/api/health")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    log.warning("page warm-up: %s did not answer", base_url)
                    return 0
                time.sleep(0.2)
        # each study's JSON and page, and the home page (a person's first page)
        paths = ["/"] + [
            f"{kind}/{sid}" for sid in study_ids for kind in ("/api/studies", "/studies")
        ]
        for _ in range(3):
            settle()
            before, done = keys(), 0
            for path in paths:
                try:
                    done += client.get(path).status_code == 200
                except httpx.HTTPError as exc:
                    log.warning("page warm-up: %s failed: %s", path, exc)
            settle()
            if keys() == before:
                break
    log.info("page warm-up: %d of %d answers built", done, len(paths))
    return done


def _preload_reads(templates: Jinja2Templates) -> None:
    """Before a server answers: take the first-use costs of every read's build (imports,
    plotly's theme and JSON encoder, the templates' compilation), which the first board and
    page after a start paid, seconds on a busy 2-core host, while its warm-up threads competed
    for the GIL (issue 27: each page's first request under 1 s)."""
    from scipy.special import stdtr, stdtrit

    from normfree.api import plots
    from normfree.fidelity import reliability  # noqa: F401

    stdtrit(3, 0.975), stdtr(3.0, -1.0)
    plots.warm()
    for name in templates.env.list_templates(extensions=["html"]):
        templates.env.get_template(name)


def _quietly(fn: Any) -> Any:
    """``fn`` for a background thread at start: a failure is logged, never raised."""

    def run(*args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("%s failed at start", getattr(fn, "__name__", fn))

    return run


def _secured(route: fastlane.Direct) -> fastlane.Direct:
    """A direct route whose answers carry the security headers: the lane sits outside their
    middleware (its replays were captured with them), and a direct answer skips it."""

    async def answer(scope: Any, match: re.Match[str]) -> Any:
        response = await route(scope, match)
        return None if response is None else security.SecurityHeadersMiddleware(response)

    return answer


def create_worker_app() -> FastAPI:
    """The app of one of ``normfree serve --workers N``'s processes: the process settings, no
    study runner (N runners would drive the same studies), the schema already migrated."""
    return create_app(get_settings(), run_studies=False, migrate=False, freeze_heap=True)
