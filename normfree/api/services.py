"""What the API does, independent of HTTP: the REST routers and the dashboard pages both call this.

Keeping the logic here (not in routers) is what lets the submit form and ``POST /api/candidates``
share one code path, and lets the CLI's ``token`` commands reuse the same storage handle.
Functions take a :class:`ServiceState` (the database, the repository, the background runner)
and return the public schemas of :mod:`normfree.api.schemas`; they raise :class:`ApiError` for
anything the client must fix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from normfree.api import schemas as S
from normfree.api.cache import ResponseCache
from normfree.api.enrich import MISSING, Enricher
from normfree.api.errors import ApiError, not_found
from normfree.jsonsafe import finite, plain
from normfree.settings import Settings
from normfree.specs import BASELINES, TERMINAL_TRIAL_STATUSES, StudySpec
from normfree.storage import Repository, Storage
from normfree.workers.lifecycle import StudyRunner

log = logging.getLogger(__name__)

# Trial statuses that count as finished (CANCELLED: a waiting trial of a cancelled study).
FINISHED = TERMINAL_TRIAL_STATUSES
# Grid of f/f' plots: wide enough to show saturation of every catalog function.
PLOT_RANGE = (-5.0, 5.0, 201)
# Submissions run the prescreen on this proxy (the tiny one: a prescreen must stay seconds).
PRESCREEN_PROXY = "vit-tiny"
# At most this many prescreens at once: each is a few seconds of CPU; more would only queue.
_PRESCREEN_SLOTS = threading.BoundedSemaphore(1)


def open_repository(settings: Settings, *, migrate: bool = True) -> Any:
    """A storage ``Repository`` over ``settings.database_url`` (schema upgraded by default)."""
    from normfree import storage

    return storage.open(settings, migrate=migrate, optuna=False).repo


# --------------------------------------------------------------------------------------- tokens


def create_token(repo: Any, name: str) -> str:
    """A new write token's plaintext (storage keeps only its hash). ValueError on a bad name."""
    if not name or len(name) > 200 or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError("a token name is 1-200 letters, digits, '-' or '_'")
    return repo.create_token(name)


def revoke_token(repo: Any, name: str) -> bool:
    return bool(repo.revoke_token(name))


def list_tokens(repo: Any) -> list[dict[str, Any]]:
    return list(repo.list_tokens())


# --------------------------------------------------------------------------- background studies


# -------------------------------------------------------------------------------------- state


@dataclass
class ServiceState:
    """The API's handles: settings, storage (its repository), and the optional study runner."""

    settings: Settings
    store: Storage  # storage.open(settings): our database and, read lazily, Optuna's
    # In-process driver (embedded default) or, with ``NORMFREE_RAY_JOBS_ADDRESS``, a submitter of
    # Ray jobs (``normfree.workers.jobs.RayJobRunner``, same duck type) so that the API process
    # is never the driver of long studies on a cluster.
    runner: Any = None
    # Run the zero-cost prescreen on submissions (off only for fuzzing, where thousands of
    # random valid formulas would each cost seconds).
    prescreen: bool = True
    started_at: float = field(default_factory=time.time)
    # Encoded reads keyed by the versions of what they show (api.cache); one per process.
    cache: ResponseCache = field(default_factory=ResponseCache)

    @classmethod
    def open(
        cls,
        settings: Settings,
        *,
        migrate: bool = True,
        run_studies: bool | None = None,
        prescreen: bool = True,
    ) -> ServiceState:
        from normfree import storage

        store = storage.open(settings, migrate=migrate, optuna=False)
        runner: Any = None
        if run_studies or run_studies is None:
            if settings.ray_jobs_address:
                from normfree.workers.jobs import RayJobRunner

                runner = RayJobRunner(settings)
            else:
                runner = StudyRunner(settings)
        return cls(settings=settings, store=store, runner=runner, prescreen=prescreen)

    @property
    def repo(self) -> Repository:
        return self.store.repo

    @property
    def db(self) -> Any:
        return self.store.db

    def verify_token(self, token: str) -> str | None:
        """The token's name when it is active, else None (recorded as a submission's submitter).

        One indexed read (``Repository.token_name``): every write request pays it.
        """
        if not token or len(token) > 256:
            return None
        return self.repo.token_name(token)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.store.close()


# --------------------------------------------------------------------------------- properties


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
    """A search_space Candidate or a storage row dict as the public schema."""
    if isinstance(c, Mapping):
        d = dict(c)
        description = d.get("citation") if source == "user" else None
        return S.CandidatePublic(
            name=d["name"],
            formula=d.get("formula"),
            canonical=d.get("canonical"),
            fingerprint=d.get("fingerprint"),
            group=d.get("group"),
            citation=None if source == "user" else d.get("citation"),
            description=description,
            properties=d.get("properties") or {},
            lineage=d.get("lineage") or {},
            source=source,  # type: ignore[arg-type]
            submitter=d.get("submitter"),
            created_at=d.get("created_at"),
        )
    d = candidate_dict(c)
    return S.CandidatePublic(
        name=d["name"],
        formula=d.get("formula"),
        canonical=d.get("canonical"),
        fingerprint=d.get("fingerprint"),
        group=d.get("group"),
        citation=d.get("citation") or None,
        description=d.get("description") or None,
        properties=d.get("properties") or {},
        lineage=d.get("lineage") or {},
        source=source,  # type: ignore[arg-type]
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
                from normfree.search_space import catalog

                _CATALOG = tuple(_candidate_public(c, source="catalog") for c in catalog.all())
    return _CATALOG


def warm_up(state: ServiceState | None = None) -> None:
    """Load the catalog and its properties once (the first request would otherwise pay), then
    queue the analysis of every function with finished trials (``api.enrich``)."""
    try:
        _catalog_public()
        if state is not None:
            from normfree.storage import reads

            with state.db.read() as conn:
                names = sorted({c for _p, c in reads.arm_candidates(conn)})
            ENRICHER.want(n for n in names if n not in BASELINES)
    except Exception:  # a warm-up failure shows up again, with its reason, in the request
        log.warning("catalog warm-up failed", exc_info=True)


@lru_cache(maxsize=1024)
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
        raise ApiError(
            422,
            "invalid_formula",
            f"formula rejected: {exc}",
            {"position": exc.position, "reason": exc.message, "field": "formula"},
        ) from None
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
    key = f"{PRESCREEN_PROXY}:{candidate.fingerprint}"
    hit = _PRESCREEN_CACHE.get(key)
    if hit is not None:
        return hit
    out = _run_prescreen(candidate)
    if out.error is None:
        if len(_PRESCREEN_CACHE) >= _PRESCREEN_CACHE_MAX:
            _PRESCREEN_CACHE.pop(next(iter(_PRESCREEN_CACHE)))
        _PRESCREEN_CACHE[key] = out
    return out


def cached_prescreen(fingerprint: str | None) -> S.PrescreenPublic | None:
    """The prescreen this process ran for a function, if any (results are not stored yet)."""
    if not fingerprint:
        return None
    return _PRESCREEN_CACHE.get(f"{PRESCREEN_PROXY}:{fingerprint}")


def _run_prescreen(candidate: Any) -> S.PrescreenPublic:
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

    return prescreen(
        NormSpec(name=candidate.name, formula=candidate.formula), proxy=PRESCREEN_PROXY, seed=0
    )


def find_duplicate(repo: Any, candidate: Any) -> str | None:
    """The name of a known candidate (catalog or stored) that is the same function, if any."""
    from normfree.search_space import catalog
    from normfree.search_space.dedup import find_duplicate as ss_find_duplicate

    hit = ss_find_duplicate(candidate, catalog.all())
    if hit is not None and hit.name != candidate.name:
        return hit.name
    for row in repo.list_candidates(fingerprint=candidate.fingerprint):
        if row["name"] != candidate.name:
            return str(row["name"])
    for row in repo.list_candidates(canonical=candidate.canonical):
        if row["name"] != candidate.name:
            return str(row["name"])
    return None


def submit_candidate(
    state: ServiceState, data: S.CandidateCreate, submitter: str | None, *, prescreen: bool = True
) -> S.CandidateSubmitted:
    """Parse, dedup, store (unless a duplicate), prescreen. Shared by REST and the form.

    The prescreen is answered when this process knows it for the function; otherwise it runs
    after the answer (``prescreen.status == "pending"``, see ``api.prescreens``).
    """
    repo = state.repo
    if data.name in BASELINES or _is_catalog_name(data.name):
        raise ApiError(
            409,
            "name_taken",
            f"{data.name!r} is a catalog name; choose another name for your formula",
            {"field": "name"},
        )
    cand = _parse_formula(data.formula, data.name)
    if data.description:
        from dataclasses import replace

        cand = replace(cand, description=data.description)
    existing = repo.get_candidate(data.name)
    if existing is not None:
        if existing.get("canonical") == cand.canonical:
            pub = _candidate_public(existing, source="user")
            return S.CandidateSubmitted(**pub.model_dump(), created=False, duplicate_of=data.name)
        raise ApiError(
            409,
            "name_taken",
            f"a different candidate is already named {data.name!r}; choose another name",
            {"field": "name", "existing_formula": existing.get("formula")},
        )
    from normfree.api import prescreens

    screening = prescreen and state.prescreen
    duplicate = find_duplicate(repo, cand)
    pub = _candidate_public(cand, source="user")
    if duplicate is not None:
        screen = prescreens.request(state, cand, None) if screening else None
        return S.CandidateSubmitted(
            **pub.model_dump(), created=False, duplicate_of=duplicate, prescreen=screen
        )
    row = candidate_dict(cand)
    # The candidates table has no description column: a user's description is stored in the
    # citation column (for a user formula, the text saying where it comes from).
    row["citation"] = data.description or None
    repo.upsert_candidate(row, submitter=submitter)
    # after the row exists: a prescreen that ends at once can record itself on it
    screen = prescreens.request(state, cand, data.name) if screening else None
    stored = repo.get_candidate(data.name) or row
    out = _candidate_public(stored, source="user").model_dump()
    out["properties"] = out["properties"] or pub.properties
    return S.CandidateSubmitted(**out, created=True, duplicate_of=None, prescreen=screen)


def list_candidates(
    state: ServiceState,
    *,
    group: str | None = None,
    properties: list[str] | None = None,
    source: str | None = None,
    q: str | None = None,
) -> S.CandidateList:
    items: list[S.CandidatePublic] = []
    if source in (None, "catalog"):
        items.extend(_catalog_public())
    if source in (None, "user"):
        names = {c.name for c in items}
        for row in state.repo.list_candidates():
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
    if len(name) > 300:
        raise not_found("candidate", name[:40] + "...")
    cand = _resolve_cached(name)
    if cand is None:
        raise not_found("candidate", name)
    return cand, _candidate_public(cand, source="catalog")


def candidate_plot(cand: Any) -> S.PlotData | None:
    if cand is None:
        return None
    from normfree.search_space.evaluation import plot_data

    lo, hi, n = PLOT_RANGE
    d = plot_data(cand, lo, hi, n)
    return S.PlotData(**{k: finite(list(d[k])) for k in ("u", "f", "df")})  # type: ignore[arg-type]


# -------------------------------------------------------------------------------- leaderboard


def _enrich(row: Mapping[str, Any], *, wait: bool = True) -> tuple[Any, Any]:
    """A board row's group and properties (``storage.leaderboard.row_group``, as the CLI files
    them), catalog analyses through ``ENRICHER``.

    ``wait=False`` takes only what ``ENRICHER`` has analysed and queues the rest.
    """
    from normfree.storage.leaderboard import row_group

    if wait:
        return row_group(row, ENRICHER.get)

    def known(name: str) -> Any:
        info = ENRICHER.peek(name)
        if info is MISSING:
            ENRICHER.want([name])
            return None
        return info

    return row_group(row, known)


def _catalog_info(name: str) -> tuple[str, dict[str, Any]] | None:
    """(group, properties) of a catalog name or transform call (50-200 ms of sympy)."""
    from normfree.search_space import catalog

    return catalog.describe(name)


ENRICHER = Enricher(_catalog_info)


def leaderboard(
    state: ServiceState,
    proxy: str,
    *,
    group: str | None = None,
    properties: list[str] | None = None,
    study_id: int | None = None,
) -> S.LeaderboardPublic:
    from normfree.storage.leaderboard import arm_text, row_options

    rows = finite(state.repo.leaderboard(proxy, study_id=study_id))
    if not rows and not _known_proxy(proxy):
        from normfree.workers.proxies import PROXIES

        raise ApiError(
            404, "not_found", f"unknown proxy {proxy!r}; choose from {sorted(PROXIES)}", None
        )
    out: list[S.LeaderboardRow] = []
    objective = next((r.get("objective") for r in rows if r.get("objective")), None)
    direction = next((r.get("direction") for r in rows if r.get("direction")), "maximize")
    best_rank = rows[0]["rank"] if rows else None
    for r in rows:
        # a filter must see every row's group and properties; a plain board shows what is known
        grp, props = _enrich(r, wait=bool(group or properties))
        if group and grp != group:
            continue
        if properties and not matches_properties(props, properties):
            continue
        label = arm_text(r["candidate"], options=row_options(r))
        out.append(
            S.LeaderboardRow(
                rank=r["rank"],
                candidate=label,
                function=r["candidate"],
                arm_key=r.get("arm_key"),
                group=grp,
                properties=props or {},
                n=r.get("n", 0),
                n_diverged=r.get("n_diverged", 0),
                n_failed=r.get("n_failed", 0),
                n_total=r.get("n_trials", 0),
                mean=r.get("mean"),
                std=r.get("std"),
                ci_low=r.get("ci_low"),
                ci_high=r.get("ci_high"),
                is_best=r["rank"] == best_rank and r.get("mean") is not None,
                indistinguishable=bool(r.get("indistinguishable_from_best", True)),
                p_vs_best=r.get("p_vs_best"),
                vs_layernorm=r.get("vs_layernorm"),
            )
        )
    filters = {"group": group, "property": properties or [], "study_id": study_id}
    from normfree.api import fidelity

    fid = (
        fidelity.summary(state, study_id=study_id)
        if study_id is not None
        else fidelity.summary(state, proxy=proxy)
        if _known_proxy(proxy)
        else None
    )
    return S.LeaderboardPublic(
        proxy=proxy,
        objective=objective,
        direction=direction,
        filters={k: v for k, v in filters.items() if v},
        fidelity=fid,
        rows=out,
    )


def _known_proxy(proxy: str) -> bool:
    try:
        from normfree.workers.proxies import PROXIES
    except ImportError:
        return True
    return proxy in PROXIES


def proxies_with_results(state: ServiceState) -> list[str]:
    """Proxies that have finished trials, then the registry's others."""
    seen: list[str] = list(state.repo.list_proxies())
    try:
        from normfree.workers.proxies import PROXIES

        seen += [p for p in PROXIES if p not in seen]
    except ImportError:
        pass
    return seen


# ------------------------------------------------------------------------------------ studies


def _progress(repo: Any, study_id: int, counts: Mapping[str, int] | None = None) -> S.StudyProgress:
    """Counts per status (an index-only count over the study's rows)."""
    from normfree.storage import reads

    if counts is None:
        with repo.db.read() as conn:
            counts = reads.study_counts(conn, study_id)
    c = dict(counts)
    total = sum(c.values())
    finished = total - c.get("WAITING", 0) - c.get("RUNNING", 0)
    return S.StudyProgress(
        total=total,
        waiting=c.get("WAITING", 0),
        running=c.get("RUNNING", 0),
        complete=c.get("COMPLETE", 0),
        diverged=c.get("DIVERGED", 0),
        pruned=c.get("PRUNED", 0),
        failed=c.get("FAILED", 0),
        cancelled=c.get("CANCELLED", 0),
        finished=finished,
        fraction=finished / total if total else 0.0,
    )


def _study_public(
    state: ServiceState, row: Mapping[str, Any], counts: Mapping[str, int] | None = None
) -> S.StudyPublic:
    return S.StudyPublic(
        id=row["id"],
        kind=row["kind"],
        name=row.get("name"),
        proxy=row["proxy"],
        status=row["status"],
        spec=row["spec"],
        created_at=row.get("created_at"),
        updated_at=row.get("updated_at"),
        progress=_progress(state.repo, row["id"], counts),
        running_in_background=bool(state.runner and state.runner.is_active(row["id"])),
    )


# ``StudySpec.params`` keys the engine reads (see workers.scheduling); anything else is a typo.
STUDY_PARAMS = frozenset(
    {
        "seed0",
        "dataset",
        "lr",
        "weight_decay",
        "warmup_epochs",
        "overrides",
        "affine",
        "alpha0_range",
        "lr_range",
        "n_startup_trials",
        "top_arms",
        "reduction_factor",
        "min_resource",
        "sampler_seed",
        # generate studies (workers.generate.GenerateOptions)
        "generations",
        "population",
        "children",
        "tournament",
        "p_crossover",
        "constraints",
        "max_size",
        "max_depth",
        "max_proposals",
        "max_prescreen",
        "prescreen",
        "alpha0",
        "untransformed_cell",
    }
)


def validate_study(data: S.StudyCreate) -> StudySpec:
    """Check a study request against the registries before anything is written (-> 422)."""
    from normfree.workers.proxies import PROXIES

    problems: list[str] = []
    if data.proxy not in PROXIES:
        problems.append(f"proxy: unknown {data.proxy!r}; choose from {sorted(PROXIES)}")
    if data.kind in ("property", "options") and not data.functions:
        problems.append("functions: a property or options study needs at least one function")
    if data.kind == "property":
        if not data.transform:
            problems.append("transform: a property study needs a transform (e.g. shift_h)")
        if not data.values and not data.params.get("untransformed_cell"):
            problems.append(
                "values: a property study needs transform values (e.g. [-1, 0, 1]), or "
                'params {"untransformed_cell": true} for a parameterless transform (sign_flip)'
            )
    if data.kind == "options" and not data.options:
        problems.append("options: an options study needs at least one option with values")
    for fn in data.functions:
        if _resolve_cached(fn) is None and fn not in BASELINES:
            problems.append(f"functions: unknown function {fn!r} (a catalog name or stored name)")
    unknown = sorted(set(data.params) - STUDY_PARAMS)
    if unknown:
        problems.append(f"params: unknown {unknown}; allowed: {sorted(STUDY_PARAMS)}")
    if data.proxy in PROXIES and data.options:
        from normfree.workers.scheduling import NORM_OPTIONS

        allowed = set(NORM_OPTIONS) | set(PROXIES[data.proxy].config_fields())
        bad = sorted(set(data.options) - allowed)
        if bad:
            problems.append(f"options: unknown {bad}; allowed for {data.proxy}: {sorted(allowed)}")
    for b in data.baselines:
        if b not in BASELINES:
            problems.append(f"baselines: {b!r} is not one of {list(BASELINES)}")
    if data.transform and data.functions and data.values and not problems:
        from normfree.workers.scheduling import transform_call

        call = transform_call(data.transform, data.functions[0], data.values[0])
        if _resolve_cached(call) is None:
            problems.append(f"transform: {data.transform!r} is not a known transform ({call})")
    n_cells = max(1, len(data.functions)) * max(1, len(data.values))
    for vals in data.options.values():
        n_cells *= len(vals)
    if data.kind == "generate" and (data.transform or data.values or data.options):
        problems.append(
            "kind: a generate study takes no transform, values or options "
            "(they belong to property and options studies)"
        )
    if data.kind == "generate" and not problems:
        from normfree.workers.generate import validate_spec

        try:
            opts = validate_spec(StudySpec.model_validate(data.model_dump()))
            n_cells = opts.population + opts.generations * opts.n_children(1)
        except (ValueError, KeyError) as exc:
            problems.append(f"params: {exc}")
    if n_cells * data.seeds > 2000:
        problems.append(f"the study has {n_cells * data.seeds} trials; the API's limit is 2000")
    if problems:
        raise ApiError(422, "invalid_study", "; ".join(problems), {"problems": problems})
    try:
        return StudySpec.model_validate(data.model_dump())
    except Exception as exc:
        raise ApiError(422, "invalid_study", str(exc)) from None


def create_study(state: ServiceState, data: S.StudyCreate) -> S.StudyPublic:
    spec = validate_study(data)
    from normfree.workers.driver import create_study as engine_create_study

    try:
        study_id = engine_create_study(spec, settings=state.settings)
    except (ValueError, KeyError, TypeError) as exc:
        # Planning validates everything the registries know (transform names, value types in
        # params, ...): the engine's reason is the message.
        raise ApiError(422, "invalid_study", f"the study cannot be planned: {exc}") from None
    if state.runner is not None:
        state.runner.submit(study_id)
    row = state.repo.get_study(study_id)
    assert row is not None
    return _study_public(state, row)


def list_studies(
    state: ServiceState, *, status: str | None = None, kind: str | None = None
) -> S.StudyList:
    rows = state.repo.list_studies(status=status)
    if kind:
        rows = [r for r in rows if r["kind"] == kind]
    items = [_study_public(state, r) for r in rows]
    return S.StudyList(count=len(items), items=items)


def _cells(
    trials: list[dict[str, Any]], spec: Mapping[str, Any]
) -> tuple[list[S.StudyCell], str | None, str]:
    """Aggregate a study's trials per arm (function x transform value / option combination)."""
    from normfree.storage import stats
    from normfree.storage.leaderboard import arm_text

    transform = spec.get("transform")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        ax = dict(t.get("axis_values") or {})
        ax.pop("seed", None)
        key = tuple(sorted((k, str(v)) for k, v in ax.items())) or (("function", t["candidate"]),)
        groups[key].append(t)
    objective = next((t.get("objective") for t in trials if t.get("objective")), None)
    direction = next((t.get("direction") for t in trials if t.get("direction")), "maximize")
    cells = []
    for ts in groups.values():
        ax = dict(ts[0].get("axis_values") or {})
        ax.pop("seed", None)
        function = str(ax.pop("function", ts[0]["candidate"]))
        baseline = bool(ax.pop("baseline", False))
        value = ax.pop(transform, None) if transform else None
        vals = [t["value"] for t in ts if t["status"] == "COMPLETE" and t.get("value") is not None]
        summ = stats.summarize(vals)
        label = arm_text(function, value, ax)
        cells.append(
            S.StudyCell(
                function=function,
                label=label,
                value=float(value) if isinstance(value, int | float) else None,
                options=ax,
                baseline=baseline,
                n=summ.n,
                n_diverged=sum(t["status"] == "DIVERGED" for t in ts),
                n_total=len(ts),
                mean=summ.mean,
                std=summ.std,
                ci_low=summ.low,
                ci_high=summ.high,
            )
        )
    cells.sort(key=lambda c: (c.baseline, c.function, c.value if c.value is not None else 0.0))
    return cells, objective, direction


@lru_cache(maxsize=4)
def _generate_report(state: ServiceState, study_id: int) -> dict[str, Any]:
    """A generate study's report (workers.generate.study_report), non-finite values cleaned."""
    from normfree.workers.generate import study_report

    return finite(study_report(state.store, study_id))


def study_key(state: ServiceState, study_id: int) -> tuple[Any, dict[str, Any], dict[str, int]]:
    """What a study's summary shows depends on, read cheaply; plus the row and the counts.

    A trial only moves forward (WAITING -> RUNNING -> a final status) and is never deleted, so the
    per-status counts change whenever a trial finishes or is added: with the study row's status
    and update time they say whether the cells (and the progress) changed.
    """
    from normfree.storage import reads

    row = state.repo.get_study(study_id)
    if row is None:
        raise not_found("study", study_id)
    with state.db.read() as conn:
        counts = reads.study_counts(conn, study_id)
    key = (study_id, row["status"], row["updated_at"], tuple(sorted(counts.items())))
    return key, row, counts


def _study_cells(
    state: ServiceState, key: Any, row: Mapping[str, Any]
) -> tuple[list[S.StudyCell], Any, Any, Any]:
    """(cells, objective, direction, generate report) of a study, built once per ``key``."""

    def build() -> tuple[list[S.StudyCell], Any, Any, Any]:
        from normfree.storage import reads

        fields = ("candidate", "status", "axis_values", "objective", "direction", "value")
        with state.db.read() as conn:
            trials = finite(reads.study_trial_rows(conn, row["id"], fields))
        cells, objective, direction = _cells(trials, row["spec"])
        if objective is None:
            try:
                from normfree.workers.scheduling import objective_of

                objective, direction = objective_of(row["proxy"])
            except Exception:  # unknown proxy in an old study: leave the objective unnamed
                pass
        generate = _generate_report(state, row["id"]) if row["kind"] == "generate" else None
        return cells, objective, direction, generate

    return state.cache.get_or_build((("study-cells", row["id"]), key), build)


def get_study(state: ServiceState, study_id: int, *, trials: bool = True) -> S.StudyDetail:
    """A study with progress and cells; ``trials`` adds every trial (use the paged list at scale:
    ``list_study_trials``)."""
    key, row, counts = study_key(state, study_id)
    cells, objective, direction, generate = _study_cells(state, key, row)
    pub = _study_public(state, row, counts)
    listed: list[S.TrialSummary] = []
    if trials:
        from normfree.storage import reads

        with state.db.read() as conn:
            rows = finite(reads.study_trial_rows(conn, study_id))
        listed = [_trial_summary(t) for t in rows]
    return S.StudyDetail(
        **pub.model_dump(),
        objective=objective,
        direction=direction,  # type: ignore[arg-type]
        generate=generate,
        cells=cells,
        trials=listed,
    )


def _trial_summary(t: Mapping[str, Any]) -> S.TrialSummary:
    return S.TrialSummary(
        id=t["id"],
        candidate=t["candidate"],
        seed=t["seed"],
        status=t["status"],
        attempt=t.get("attempt", 0),
        axis_values=t.get("axis_values") or {},
        objective_value=t.get("value"),
    )


def list_study_trials(
    state: ServiceState,
    study_id: int,
    *,
    limit: int = 100,
    cursor: str | None = None,
    status: list[str] | None = None,
) -> S.TrialPage:
    """One page of a study's trials in id order; ``next_cursor`` fetches the next one."""
    from normfree.storage import reads

    if state.repo.get_study(study_id) is None:
        raise not_found("study", study_id)
    after = 0
    if cursor:
        try:
            after = int(cursor)
        except ValueError:
            raise ApiError(422, "invalid_cursor", "cursor: pass back a next_cursor") from None
    with state.db.read() as conn:
        rows, nxt = reads.trial_page(conn, study_id, after=after, limit=limit, status=status)
    items = [_trial_summary(t) for t in finite(rows)]
    return S.TrialPage(count=len(items), items=items, next_cursor=str(nxt) if nxt else None)


def control_study(state: ServiceState, study_id: int, action: str) -> S.StudyPublic:
    """Pause, resume or cancel through the one state machine (``workers.lifecycle``).

    Resuming a study that this process has no driver for (left pending or running by a stopped
    server, or failed) restarts one: the driver requeues trials whose leases expired.
    """
    from normfree.workers import lifecycle

    restart = state.runner is not None and not state.runner.is_active(study_id)
    try:
        lifecycle.steer(state.repo, study_id, action, restart=restart)
    except KeyError:
        raise not_found("study", study_id) from None
    except lifecycle.TransitionError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    if action == "resume" and state.runner is not None:
        state.runner.submit(study_id)
    row = state.repo.get_study(study_id)
    assert row is not None
    return _study_public(state, row)


# ------------------------------------------------------------------------------------- trials


def get_trial(state: ServiceState, trial_id: int) -> S.TrialPublic:
    t = state.repo.get_trial(trial_id)
    if t is None:
        raise not_found("trial", trial_id)
    t = finite(t)
    return S.TrialPublic(
        **{k: v for k, v in t.items() if k in S.TrialPublic.model_fields and k != "curves"},
        objective_value=t.get("value"),
        curves=t.get("curves") or [],
    )
