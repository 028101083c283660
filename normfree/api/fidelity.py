"""Reference sets and fidelity reports for the API and the pages (service functions).

The routers stay thin: they call these functions, which turn storage and report results into
the public schemas and every refusal into an :class:`~normfree.api.errors.ApiError` with the
reason (an unknown cell name says which row and why; nothing of a refused set is stored).
"""

from __future__ import annotations

import json
import logging
import warnings
from typing import Any
from urllib.parse import urlencode

from normfree.api import schemas as S
from normfree.api.errors import ApiError
from normfree.fidelity.reference import ReferenceError, build_set, cell_key, from_csv, to_csv
from normfree.fidelity.report import headline
from normfree.storage.references import (
    BUILTIN_NAME,
    ReferenceExists,
    ReferenceForbidden,
    ReferenceStore,
)
from normfree.storage.tokens import Principal

log = logging.getLogger(__name__)


def _store(state: Any) -> ReferenceStore:
    store = ReferenceStore(state.db)
    store.ensure_builtin()
    return store


def list_references(state: Any) -> S.ReferenceSetList:
    items = [S.ReferenceSetPublic(**r) for r in _store(state).list()]
    return S.ReferenceSetList(count=len(items), items=items)


def get_reference(state: Any, name: str) -> S.ReferenceSetDetail:
    found = _store(state).describe(name)
    if found is None:
        raise ApiError(404, "not_found", f"no reference set {name!r:.200}; see /api/references")
    return S.ReferenceSetDetail(**found)


def reference_csv(state: Any, name: str) -> str:
    ref = _store(state).get(name)
    if ref is None:
        raise ApiError(404, "not_found", f"no reference set {name!r:.200}; see /api/references")
    return to_csv(ref)


def import_reference(
    state: Any,
    body: bytes,
    content_type: str,
    *,
    who: Principal,
    name: str | None,
    title: str,
    source: str | None,
    replace: bool,
) -> S.ReferenceSetPublic:
    """Validate and store a set sent as JSON (the whole set) or CSV (rows; name and source in
    the query), owned by ``who``. 422 with every bad row, 409 when the name exists and
    ``replace`` is off, 403 when replacing another token's set without an admin token.
    (The REST route parses in a worker process instead: :func:`parse_reference` there, then
    :func:`store_reference` here.)"""
    ref = parse_reference(body, content_type, name, title, source)
    return store_reference(state, ref, who=who, replace=replace)


def parse_reference(
    body: bytes, content_type: str, name: str | None, title: str, source: str | None
) -> Any:
    """The body as a validated ReferenceSet (every cell resolved through the catalog: formula
    parses), or the 4xx that says why. Pure: runs in a worker process (``api.offload``)."""
    try:
        if content_type.startswith("text/csv"):
            if not name or not source:
                raise ApiError(
                    422, "invalid", "a CSV import needs ?name=...&source=... (the citation)"
                )
            return from_csv(body.decode("utf-8"), name=name, source=source, title=title)
        if content_type.startswith("application/json") or not content_type:
            data = json.loads(body.decode("utf-8"))
            if not isinstance(data, dict):
                raise ApiError(422, "invalid", "the JSON body must be an object (a reference set)")
            return build_set(data)
        raise ApiError(
            415, "unsupported_media_type", "send application/json (a set) or text/csv (rows)"
        )
    except UnicodeDecodeError:
        raise ApiError(422, "invalid", "the body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ApiError(422, "invalid", f"the body is not JSON: {exc.msg} at {exc.pos}") from None
    except ReferenceError as exc:
        raise ApiError(422, "invalid_reference", f"reference set refused: {exc}"[:4000]) from None


def parse_reference_keyed(
    body: bytes, content_type: str, name: str | None, title: str, source: str | None
) -> tuple[Any, tuple[str, ...]]:
    """:func:`parse_reference` and each row's cell key (the parse computed them: cached), for a
    worker process to send back with the set, so that storing it parses nothing in the server:
    there a formula's parse holds the GIL, and the event loop waited for it at every switch
    (~1 s for bench_hostile's import of 4 long formulas, bench/results/hostile-quick.md)."""
    ref = parse_reference(body, content_type, name, title, source)
    return ref, tuple(cell_key(r.cell) for r in ref.rows)


def store_reference(
    state: Any,
    ref: Any,
    *,
    who: Principal,
    replace: bool,
    cell_keys: tuple[str, ...] | None = None,
) -> S.ReferenceSetPublic:
    """Store a parsed set owned by ``who`` (``cell_keys``: its rows' keys, if parsed
    elsewhere); 409 when the name exists and ``replace`` is off, 403 when replacing another
    token's set without an admin token."""
    try:
        out = _store(state).put(
            ref,
            submitter=who.name,
            replace=replace,
            owner_token_id=who.id,
            admin=who.admin,
            cell_keys=cell_keys,
        )
    except ReferenceExists as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except ReferenceForbidden as exc:
        raise ApiError(403, "forbidden", str(exc)) from None
    return S.ReferenceSetPublic(**out)


def delete_reference(state: Any, name: str, who: Principal, *, dry_run: bool = False) -> int:
    """Remove a set: 404 when none, 409 for the built-in one, 403 for another token's; the
    number of its rows (removed with it, or with ``dry_run`` that would be: nothing removed)."""
    held = _store(state).get(name)
    rows = len(held.rows) if held is not None else 0
    try:
        found = _store(state).delete(name, owner_token_id=who.id, admin=who.admin, dry_run=dry_run)
    except ReferenceExists as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except ReferenceForbidden as exc:
        raise ApiError(403, "forbidden", str(exc)) from None
    if not found:
        raise ApiError(404, "not_found", f"no reference set {name!r:.200}; see /api/references")
    return rows


def page_url(proxy: str | None, study_id: int | None, reference: str = BUILTIN_NAME) -> str:
    query: dict[str, Any] = {"study_id": study_id} if study_id is not None else {"proxy": proxy}
    if reference != BUILTIN_NAME:
        query["reference"] = reference
    return "/fidelity?" + urlencode(query)


def report(
    state: Any,
    *,
    proxy: str | None = None,
    study_id: int | None = None,
    reference: str = BUILTIN_NAME,
    n_boot: int | None = None,
) -> S.FidelityReport:
    from normfree.fidelity.report import BOOTSTRAP
    from normfree.workers.fidelity import FidelityError, fidelity_report

    if (proxy is None) == (study_id is None):
        raise ApiError(422, "invalid", "give exactly one of proxy or study_id")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # scipy on constant samples
            rep = fidelity_report(
                state.db,
                proxy=proxy,
                study_id=study_id,
                reference=reference,
                n_boot=BOOTSTRAP if n_boot is None else n_boot,
            )
    except FidelityError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return S.FidelityReport(**rep, headline=headline(rep))


# A report's time limit in a worker: the pool's (a formula's) or this, whichever is longer (a
# report over thousands of trials is seconds of bootstrap, not a hostile input).
FIDELITY_SECONDS_FLOOR = 60.0

# The worker process's own engines (one per database URL): a worker computes many reports.
_WORKER_DBS: dict[str, Any] = {}


def report_dict(
    url: str, proxy: str | None, study_id: int | None, reference: str, n_boot: int | None
) -> dict[str, Any]:
    """The report as :func:`report` answers it, computed from the database at ``url``; runs in
    a worker process (``api.offload``): the bootstrap and the trial reads are CPU seconds that
    would otherwise hold the server's GIL while every other request waits (issue 28)."""
    return report(
        _worker_state(url), proxy=proxy, study_id=study_id, reference=reference, n_boot=n_boot
    ).model_dump()


def _worker_state(url: str) -> _DbOnly:
    """The worker process's state for the database at ``url`` (its engine made once)."""
    from normfree.storage.db import Database

    db = _WORKER_DBS.get(url)
    if db is None:
        db = _WORKER_DBS[url] = Database(url)
    return _DbOnly(db)


class _DbOnly:
    """What :func:`report` reads of a service state: its database."""

    def __init__(self, db: Any) -> None:
        self.db = db


def _shared(url: str) -> bool:
    """Whether another process can open this database (an in-memory SQLite cannot)."""
    return ":memory:" not in url and "mode=memory" not in url


async def report_off_loop(
    request: Any,
    state: Any,
    *,
    proxy: str | None = None,
    study_id: int | None = None,
    reference: str = BUILTIN_NAME,
) -> S.FidelityReport:
    """:func:`report` for a route, in a worker process behind the client's queue and the time
    limit (``api.offload``); on an in-memory database (tests), in the thread pool."""
    from starlette.concurrency import run_in_threadpool

    from normfree.api import offload, security

    if (proxy is None) == (study_id is None):
        raise ApiError(422, "invalid", "give exactly one of proxy or study_id")
    url = state.db.url
    if not _shared(url):
        return await run_in_threadpool(
            report, state, proxy=proxy, study_id=study_id, reference=reference
        )
    pool = offload.pool(request)
    out = await pool.call(
        security.client_id(request),
        "normfree.api.fidelity:report_dict",
        url,
        proxy,
        study_id,
        reference,
        None,
        what="the fidelity report",
        seconds=max(FIDELITY_SECONDS_FLOOR, pool.seconds),
    )
    return S.FidelityReport(**out)


def summary_dict(url: str, proxy: str | None, study_id: int | None) -> dict[str, Any] | None:
    """:func:`summary` computed from the database at ``url``, as a dict; runs in the server's
    background worker process (``api.offload.BackgroundWorker``, ``api.lines``)."""
    line = summary(_worker_state(url), proxy=proxy, study_id=study_id)
    return None if line is None else line.model_dump()


def summary_anywhere(
    state: Any, *, proxy: str | None = None, study_id: int | None = None
) -> S.FidelitySummary | None:
    """:func:`summary`, in the server's background worker process (``api.offload``) when there
    is one and the database is one that process can open; else here."""
    from normfree.api import offload

    if _shared(state.db.url):
        done, out = offload.in_background(
            "normfree.api.fidelity:summary_dict",
            state.db.url,
            proxy,
            study_id,
            what="the fidelity line",
            seconds=FIDELITY_SECONDS_FLOOR,
        )
        if done:
            return None if out is None else S.FidelitySummary(**out)
    from normfree.api.lines import preload_once

    preload_once()  # computed in this process: its imports frozen first (in a server)
    return summary(state, proxy=proxy, study_id=study_id)


def summary(
    state: Any, *, proxy: str | None = None, study_id: int | None = None
) -> S.FidelitySummary | None:
    """The line a leaderboard shows beside its ranking (None when it cannot be computed: a
    fidelity problem never takes a leaderboard down)."""
    try:
        rep = report(state, proxy=proxy, study_id=study_id, n_boot=0)  # no intervals: cheap
    except ApiError:
        return None
    except Exception:  # logged, not raised: the ranking is still worth showing
        log.exception("fidelity summary failed for proxy=%s study=%s", proxy, study_id)
        return None
    return S.FidelitySummary(
        reference=rep.reference["name"],
        headline=rep.headline,
        # the report's pooled figures that the summary shows, under the report's own names
        **{k: v for k, v in rep.summary.items() if k in S.FidelitySummary.model_fields},
        calibrated=rep.calibrated,
        calibration=rep.calibration,
        reliability=rep.reliability,
        url=page_url(proxy, study_id, BUILTIN_NAME),
    )


__all__ = [
    "delete_reference",
    "get_reference",
    "import_reference",
    "list_references",
    "page_url",
    "reference_csv",
    "report",
    "report_dict",
    "report_off_loop",
    "summary",
    "summary_anywhere",
    "summary_dict",
]
