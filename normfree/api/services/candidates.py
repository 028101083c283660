"""Candidates: the catalog as public rows, submissions (parse, dedup, store, prescreen) and the
property filters the list and the leaderboards share.

A submitted formula is parsed once per process (cached by text); its prescreen runs after the
answer (``api.prescreens``), bounded to one at a time, and is remembered by fingerprint.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from normfree.api import schemas as S
from normfree.api.errors import ApiError, not_found
from normfree.api.services.state import ServiceState
from normfree.jsonsafe import finite, plain, readable_mapping
from normfree.specs import RESERVED_NAMES, is_reserved_name
from normfree.storage.candidates import CandidateConflict
from normfree.storage.protocols import CandidateStore

log = logging.getLogger(__name__)

# Grid of f/f' plots: wide enough to show saturation of every catalog function.
PLOT_RANGE = (-5.0, 5.0, 201)
# Submissions run the prescreen on this proxy (the tiny one: a prescreen must stay seconds).
PRESCREEN_PROXY = "vit-tiny"
# At most this many prescreens at once: each is a few seconds of CPU; more would only queue.
_PRESCREEN_SLOTS = threading.BoundedSemaphore(1)


def _flatten(props: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in props.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def property_flags(props: Mapping[str, Any] | None) -> dict[str, Any]:
    """Properties as flat ``name -> value`` pairs (nested dicts joined with '.')."""
    return _flatten(props or {})


def matches_properties(props: Mapping[str, Any] | None, wanted: Iterable[str]) -> bool:
    """Each filter is ``name`` (the property is true) or ``name=value`` (equal as text).

    ``name`` matches a flattened key exactly or as its last part, so ``bounded`` finds
    ``bounded`` and ``boundedness.bounded`` alike.
    """
    flat = property_flags(props)
    for item in wanted:
        key, _, value = item.partition("=")
        key = key.strip()
        hits = [v for k, v in flat.items() if k == key or k.endswith("." + key)]
        if not hits:
            return False
        if value:
            if not any(str(v).lower() == value.strip().lower() for v in hits):
                return False
        elif not any(v is True or (isinstance(v, str) and v and v != "neither") for v in hits):
            return False
    return True


# --------------------------------------------------------------------------------- candidates


def formula_rejected(exc: Any, field: str) -> ApiError:
    """The 422 of a formula the parser refuses: its positioned reason, and which field held it."""
    return ApiError(
        422,
        "invalid_formula",
        f"formula rejected: {exc}",
        {"position": exc.position, "reason": exc.message, "field": field},
    )


_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


@lru_cache(maxsize=4096)
def _resolve_cached(text: str) -> Any:
    """A catalog candidate (or transform call) by text; None if the catalog does not know it."""
    from normfree.search_space import ExpressionError, catalog

    try:
        return catalog.resolve(text)
    except (ExpressionError, KeyError, ValueError):
        return None
    except Exception:  # any other failure on odd text is still "not a known candidate"
        log.warning("catalog.resolve failed on %r", text[:100], exc_info=True)
        return None


def _is_catalog_name(name: str) -> bool:
    from normfree.search_space import catalog

    try:
        catalog.get(name)
        return True
    except (KeyError, ValueError, Exception):
        return False


def _candidate_public(c: Any, *, source: str) -> S.CandidatePublic:
    """A search_space Candidate or a storage row dict as the public schema.

    A stored user submission keeps its description in the row's ``citation`` column (users cite
    nothing), so it moves to ``description`` here; catalog entries carry both.
    """
    if isinstance(c, Mapping):
        d = dict(c)
        stored = {
            "submitter": d.get("submitter"),
            "created_at": d.get("created_at"),
            "archived": d.get("archived_at") is not None,
        }
        if source == "user":
            d["description"], d["citation"] = d.get("citation"), None
        else:
            d["description"] = None
    else:
        d, stored = candidate_dict(c), {}
    # a corrupt stored row (a NOT NULL JSON column read as None, or not a mapping): the field
    # shown empty, and named
    unreadable: list[str] = list(d.get("unreadable") or [])
    if "properties" in unreadable:
        d["properties"] = {}
    if "lineage" in unreadable:
        d["lineage"] = {}
    return S.CandidatePublic(
        name=d["name"],
        formula=d.get("formula"),
        canonical=d.get("canonical"),
        fingerprint=d.get("fingerprint"),
        group=d.get("group"),
        citation=d.get("citation") or None,
        description=d.get("description") or None,
        properties=readable_mapping(d.get("properties", {}), "properties", unreadable) or {},
        lineage=readable_mapping(d.get("lineage", {}), "lineage", unreadable) or {},
        source=source,  # type: ignore[arg-type]
        unreadable=unreadable,
        **stored,
    )


def candidate_dict(c: Any) -> dict[str, Any]:
    """``Candidate.to_dict()`` with JSON-safe properties; without them if they cannot be computed
    (a property computation that fails must not lose the submission)."""
    try:
        d = c.to_dict()
    except Exception:
        log.warning("properties of %s could not be computed", c.name, exc_info=True)
        d = c.to_dict(with_properties=False)
    d["properties"] = finite(d.get("properties") or {}, "text")
    return d


_CATALOG_LOCK = threading.Lock()
_CATALOG: tuple[S.CandidatePublic, ...] | None = None


def _catalog_public() -> tuple[S.CandidatePublic, ...]:
    """The catalog as public rows, built once per process under a lock (seconds of sympy: the
    warm-up thread and early requests must not each build it)."""
    global _CATALOG
    if _CATALOG is None:
        with _CATALOG_LOCK:
            if _CATALOG is None:
                from normfree.api import offload

                # in a server, built by its background worker (seconds of sympy that would
                # hold this process's GIL while the first requests wait; issue 27)
                done, rows = offload.in_background(
                    "normfree.api.services.candidates:catalog_public_rows",
                    what="the catalog",
                    seconds=_CATALOG_SECONDS,
                )
                if done:
                    _CATALOG = tuple(S.CandidatePublic(**r) for r in rows)
                else:
                    _CATALOG = _build_catalog_public()
    return _CATALOG


# The catalog's build in a worker: seconds, more on a busy host (not a hostile input).
_CATALOG_SECONDS = 300.0


def _build_catalog_public() -> tuple[S.CandidatePublic, ...]:
    from normfree.search_space import catalog

    return tuple(_candidate_public(c, source="catalog") for c in catalog.all())


def catalog_public_rows() -> list[dict[str, Any]]:
    """The catalog's public rows as dicts: what a server's background worker sends back."""
    return [c.model_dump() for c in _build_catalog_public()]


_PARSE_CACHE_SIZE = 1024
# A Candidate's dataclass fields (the rest of its __dict__ is cached_property values).
_FIELDS = frozenset(
    {
        "name",
        "formula",
        "expr",
        "derivative",
        "lineage",
        "group",
        "citation",
        "description",
        "kinks",
    }
)


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parse_cached(formula: str, name: str) -> Any:
    """Parsing is pure (text in, frozen Candidate out): resubmissions reuse the result."""
    from normfree.search_space import parse

    return parse(formula, name=name)


def _parse_formula(formula: str, name: str) -> Any:
    """Parse a user formula; the parser's positioned message becomes a 422."""
    from normfree.search_space import ExpressionError

    try:
        return _parse_cached(formula, name)
    except ExpressionError as exc:
        raise formula_rejected(exc, "formula") from None
    except RecursionError:
        raise ApiError(
            422, "invalid_formula", "formula rejected: nested too deeply", {"field": "formula"}
        ) from None


_PRESCREEN_CACHE: dict[str, S.PrescreenPublic] = {}
_PRESCREEN_CACHE_MAX = 1024


def run_prescreen(candidate: Any) -> S.PrescreenPublic:
    """The zero-cost prescreen, cached per function (fingerprint) in this process.

    Deterministic for a function (fixed seed), so a resubmission or a duplicate reuses the
    answer instead of spending seconds of CPU again.
    """
    hit = cached_prescreen(candidate.fingerprint)
    if hit is not None:
        return hit
    out = run_prescreen_uncached(candidate)
    remember_prescreen(candidate.fingerprint, out)
    return out


def remember_prescreen(fingerprint: str | None, out: S.PrescreenPublic) -> None:
    """Keep a finished prescreen for later submissions of the function (not a failed one)."""
    if out.error is not None or not fingerprint:
        return
    if len(_PRESCREEN_CACHE) >= _PRESCREEN_CACHE_MAX:
        _PRESCREEN_CACHE.pop(next(iter(_PRESCREEN_CACHE)))
    _PRESCREEN_CACHE[f"{PRESCREEN_PROXY}:{fingerprint}"] = out
    _REMEMBERED[0] += 1


# How many prescreens this process has remembered: cached reads that show them key on it.
_REMEMBERED = [0]


def prescreens_known() -> int:
    """A counter that moves whenever :func:`remember_prescreen` keeps one (``api.prescreens``)."""
    return _REMEMBERED[0]


def cached_prescreen(fingerprint: str | None) -> S.PrescreenPublic | None:
    """The prescreen this process knows for a function, if any (the stored one is on the
    candidate row: ``prescreens.status`` reads it first)."""
    if not fingerprint:
        return None
    return _PRESCREEN_CACHE.get(f"{PRESCREEN_PROXY}:{fingerprint}")


def run_prescreen_uncached(candidate: Any) -> S.PrescreenPublic:
    """The zero-cost prescreen, bounded to seconds; a failure is reported, never raised."""
    t0 = time.perf_counter()
    try:
        from normfree.workers.prescreen import prescreen
    except ImportError as exc:
        return S.PrescreenPublic(ok=False, error=f"prescreen unavailable: {exc}")
    with _PRESCREEN_SLOTS:
        try:
            result = _call_prescreen(prescreen, candidate)
        except Exception as exc:  # a prescreen crash must not lose the submission
            log.warning("prescreen failed for %s", getattr(candidate, "name", "?"), exc_info=True)
            return S.PrescreenPublic(
                ok=False,
                proxy=PRESCREEN_PROXY,
                error=f"{type(exc).__name__}: {exc}"[:500],
                seconds=time.perf_counter() - t0,
            )
    data = plain(result)
    if not isinstance(data, dict):
        data = {"value": data}
    ok = bool(data.get("ok", data.get("survived", data.get("trainable", True))))
    return S.PrescreenPublic(
        ok=ok,
        proxy=str(data.get("proxy") or PRESCREEN_PROXY),
        result=finite(data, "text"),  # a prescreen's NaN is its finding: keep it as text
        seconds=time.perf_counter() - t0,
    )


def _call_prescreen(prescreen: Any, candidate: Any) -> Any:
    from normfree.specs import NormSpec

    # The Candidate travels: the prescreen builds its operator from it, parsing nothing again.
    norm = NormSpec(name=candidate.name, formula=candidate.formula)
    return prescreen(norm, proxy=PRESCREEN_PROXY, seed=0, candidate=candidate)


# The catalog entry each function (by canonical form) duplicates, or None: the catalog never
# changes while the process runs, and comparing with each entry's probe values was a third of a
# resubmission's time (bench/bench_read_scale.py, ``submit``).
_CATALOG_DUPLICATE: dict[str, str | None] = {}


def _catalog_duplicate(candidate: Any, known: str | bool | None = False) -> str | None:
    """The catalog entry ``candidate`` duplicates (or None), remembered by canonical form;
    ``known`` (a worker's answer) is remembered instead of computed when given."""
    if candidate.canonical not in _CATALOG_DUPLICATE:
        if known is False:
            from normfree.search_space import catalog
            from normfree.search_space.dedup import find_duplicate as ss_find_duplicate

            hit = ss_find_duplicate(candidate, catalog.all())
            known = None if hit is None else hit.name
        if len(_CATALOG_DUPLICATE) >= _PARSE_CACHE_SIZE:
            _CATALOG_DUPLICATE.clear()
        _CATALOG_DUPLICATE[candidate.canonical] = known  # type: ignore[assignment]
    return _CATALOG_DUPLICATE[candidate.canonical]


def find_duplicate(repo: CandidateStore, candidate: Any) -> str | None:
    """The name of a known candidate (catalog or stored) that is the same function, if any."""
    name = _catalog_duplicate(candidate)
    if name is not None and name != candidate.name:
        return name
    for row in repo.list_candidates(fingerprint=candidate.fingerprint):
        if row["name"] != candidate.name:
            return str(row["name"])
    for row in repo.list_candidates(canonical=candidate.canonical):
        if row["name"] != candidate.name:
            return str(row["name"])
    return None


def check_submission_name(name: str) -> None:
    """409 when ``name`` is reserved (a baseline's or a paper alias's) or a catalog entry's
    (before any parse)."""
    if is_reserved_name(name):
        raise ApiError(
            409,
            "name_taken",
            f"{name!r} is reserved: training and reference sets read it as a baseline or "
            f"a paper's operator ({', '.join(sorted(RESERVED_NAMES))}); choose another name",
            {"field": "name"},
        )
    if _is_catalog_name(name):
        raise ApiError(
            409,
            "name_taken",
            f"{name!r} is a catalog name; choose another name for your formula",
            {"field": "name"},
        )


# Submissions parsed by a worker, by (formula, name): a resubmission is stored without one.
_PARSED: dict[tuple[str, str], tuple[Any, str | None]] = {}


def parsed_submission(formula: str, name: str) -> tuple[Any, str | None] | None:
    """The worker's answer for this submission, when this process has it."""
    return _PARSED.get((formula, name))


def remember_parsed(formula: str, name: str, parsed: tuple[Any, str | None]) -> None:
    if len(_PARSED) >= _PARSE_CACHE_SIZE:
        _PARSED.pop(next(iter(_PARSED)))
    _PARSED[(formula, name)] = parsed


def submit_candidate(
    state: ServiceState,
    data: S.CandidateCreate,
    submitter: str | None,
    *,
    prescreen: bool = True,
    parsed: tuple[Any, str | None] | None = None,
    owner_token_id: int | None = None,
) -> S.CandidateSubmitted:
    """Parse, dedup, store (unless a duplicate), prescreen. Shared by REST and the form.

    ``parsed``: :func:`parse_submission`'s answer from a worker process (the REST route's way);
    without it the formula is parsed here. The prescreen is answered when this process knows it
    for the function; otherwise it runs after the answer (``prescreen.status == "pending"``,
    see ``api.prescreens``).
    """
    repo = state.repo
    check_submission_name(data.name)
    if parsed is not None:
        cand = parsed[0]
        _catalog_duplicate(cand, parsed[1])
    else:
        cand = _parse_formula(data.formula, data.name)
    if data.description:
        from dataclasses import replace

        described = replace(cand, description=data.description)
        # keep what was computed (properties: seconds of sympy) on the copy
        described.__dict__.update({k: v for k, v in cand.__dict__.items() if k not in _FIELDS})
        cand = described
    existing = repo.get_candidate(data.name)
    if existing is not None:
        return _name_held(state, existing, cand, data.name, prescreen)
    from normfree.api import prescreens

    screening = prescreen and state.prescreen
    duplicate = find_duplicate(repo, cand)
    pub = _candidate_public(cand, source="user")
    if duplicate is not None:
        return _duplicate(state, cand, pub, duplicate, screening)
    row = candidate_dict(cand)
    # The candidates table has no description column: a user's description is stored in the
    # citation column (for a user formula, the text saying where it comes from).
    row["citation"] = data.description or None
    # One INSERT claims the name and the function (unique name and canonical key): of racers,
    # one stores and the others learn who won. A pending prescreen is written with the row, so
    # one interrupted by a crash is re-queued at the next start (prescreens.requeue_interrupted).
    try:
        repo.claim_candidate(
            row,
            submitter=submitter,
            prescreen=prescreens.pending().model_dump(mode="json") if screening else None,
            owner_token_id=owner_token_id,
            prescreen_claimant=prescreens.CLAIMANT if screening else None,
        )
    except CandidateConflict as lost:
        if lost.field == "name":
            return _name_held(state, lost.existing, cand, data.name, prescreen)
        return _duplicate(state, cand, pub, str(lost.existing["name"]), screening)
    # after the row exists: a prescreen that ends at once can record itself on it
    screen = prescreens.request(state, cand, data.name) if screening else None
    stored = repo.get_candidate(data.name) or row
    out = _candidate_public(stored, source="user").model_dump()
    out["properties"] = out["properties"] or pub.properties
    return S.CandidateSubmitted(**out, created=True, duplicate_of=None, prescreen=screen)


def _name_held(
    state: ServiceState, existing: Mapping[str, Any], cand: Any, name: str, prescreen: bool
) -> S.CandidateSubmitted:
    """The name is stored: the same function is a resubmission (nothing stored, 200), another
    one a 409."""
    if existing.get("canonical") != cand.canonical:
        raise ApiError(
            409,
            "name_taken",
            f"a different candidate is already named {name!r}; choose another name",
            {"field": "name", "existing_formula": existing.get("formula")},
        )
    pub = _candidate_public(existing, source="user")
    screen = None
    if prescreen and state.prescreen and _prescreen_unfinished(existing.get("prescreen")):
        from normfree.api import prescreens

        # its prescreen was lost (a crash) or still runs: ask again (joins a running one)
        screen = prescreens.request(state, cand, name)
    return S.CandidateSubmitted(
        **pub.model_dump(), created=False, duplicate_of=name, prescreen=screen
    )


def _prescreen_unfinished(stored: Mapping[str, Any] | None) -> bool:
    return isinstance(stored, Mapping) and stored.get("status") == "pending"


def _duplicate(
    state: ServiceState, cand: Any, pub: S.CandidatePublic, duplicate: str, screening: bool
) -> S.CandidateSubmitted:
    from normfree.api import prescreens

    screen = prescreens.request(state, cand, None) if screening else None
    return S.CandidateSubmitted(
        **pub.model_dump(), created=False, duplicate_of=duplicate, prescreen=screen
    )


def list_candidates(
    state: ServiceState,
    *,
    group: str | None = None,
    properties: list[str] | None = None,
    source: str | None = None,
    q: str | None = None,
    archived: bool = False,
) -> S.CandidateList:
    """The catalog and the stored candidates (archived ones only with ``archived``)."""
    items: list[S.CandidatePublic] = []
    if source in (None, "catalog"):
        items.extend(_catalog_public())
    if source in (None, "user"):
        names = {c.name for c in items}
        for row in state.repo.list_candidates(archived=archived):
            if row["name"] not in names:
                items.append(_candidate_public(row, source="user"))
    if group:
        items = [c for c in items if c.group == group]
    if properties:
        items = [c for c in items if matches_properties(c.properties, properties)]
    if q:
        items = [c for c in items if q.lower() in c.name.lower()]
    return S.CandidateList(count=len(items), items=items)


def get_candidate_object(state: ServiceState, name: str) -> tuple[Any, S.CandidatePublic]:
    """(search_space Candidate, public row) for a catalog name, transform call or stored name."""
    row = state.repo.get_candidate(name)
    if row is not None and row.get("formula"):
        try:
            from normfree.search_space import parse

            cand = parse(row["formula"], name=name)
        except Exception:  # stored before a parser change: show the row without plots
            cand = None
        return cand, _candidate_public(row, source="user")
    cand = resolve_name(name)
    return cand, _candidate_public(cand, source="catalog")


def parse_for_read(name: str) -> tuple[Any, S.CandidatePublic, S.PlotData | None]:
    """In a worker process (``api.offload``): a name that must be parsed (a formula or a
    transform call), with its properties and plot computed there, where sympy's time costs
    the server nothing; the Candidate travels back with them cached on it."""
    cand = resolve_name(name)
    return cand, _candidate_public(cand, source="catalog"), candidate_plot(cand)


def parse_submission(formula: str, name: str) -> tuple[Any, str | None]:
    """In a worker process: a submitted formula parsed, its properties computed and the catalog
    entry it duplicates (or None); the server then only stores it (``submit_candidate``)."""
    cand = _parse_formula(formula, name)
    candidate_dict(cand)  # properties, canonical form and fingerprint, cached on the candidate
    return cand, _catalog_duplicate(cand)


def resolve_name(name: str) -> Any:
    """A catalog name or transform call as a Candidate; 422 with the parser's reason for a
    formula it refuses, 404 for an unknown bare name."""
    if len(name) > 300:
        raise not_found("candidate", name[:40] + "...")
    cand = _resolve_cached(name)
    if cand is None:
        if not _BARE_NAME.fullmatch(name):
            # a formula the catalog refuses: say why (422 with the parser's reason), as a
            # submission would, instead of pretending it is an unknown name
            from normfree.search_space import ExpressionError, catalog

            try:
                catalog.resolve(name)
            except ExpressionError as exc:
                raise formula_rejected(exc, "name") from None
            except Exception:
                pass
        raise not_found("candidate", name)
    return cand


_PLOTS: OrderedDict[tuple[str, str], S.PlotData] = OrderedDict()
_PLOTS_MAX = 512
_PLOTS_LOCK = threading.Lock()


def candidate_plot(cand: Any) -> S.PlotData | None:
    """f and f' on :data:`PLOT_RANGE`; remembered per function (name and fingerprint): a
    candidate's page or JSON is read far more often than a function changes, and the curve was
    half of such a read's server time under the hostile benchmark's readers."""
    if cand is None:
        return None
    key = (str(getattr(cand, "name", "")), str(getattr(cand, "fingerprint", "")))
    if not key[1]:
        return _plot(cand)
    with _PLOTS_LOCK:
        hit = _PLOTS.get(key)
        if hit is not None:
            _PLOTS.move_to_end(key)
            return hit
    out = _plot(cand)
    with _PLOTS_LOCK:
        _PLOTS[key] = out
        while len(_PLOTS) > _PLOTS_MAX:
            _PLOTS.popitem(last=False)
    return out


def _plot(cand: Any) -> S.PlotData:
    from normfree.search_space.evaluation import plot_data

    lo, hi, n = PLOT_RANGE
    d = plot_data(cand, lo, hi, n)
    return S.PlotData(**{k: finite(list(d[k])) for k in ("u", "f", "df")})  # type: ignore[arg-type]
