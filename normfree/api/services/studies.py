"""Studies: validation and creation, lists, one study's cells and trials, and the transitions
(``workers.lifecycle``: the one state machine the CLI uses too)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from normfree.api import schemas as S
from normfree.api.errors import ApiError, not_found
from normfree.api.inputs import db_int
from normfree.api.services.state import ServiceState
from normfree.jsonsafe import finite, readable_mapping
from normfree.settings import Settings
from normfree.specs import TERMINAL_TRIAL_STATUSES, TRIAL_STATUSES, StudySpec
from normfree.storage.protocols import RepositoryLike
from normfree.storage.tokens import Principal
from normfree.workers import progress
from normfree.workers.progress import arm_of

if TYPE_CHECKING:
    from normfree.search_space.resolver import Stored

log = logging.getLogger(__name__)


def _progress(
    repo: RepositoryLike,
    study_id: int,
    snap: progress.Snapshot | None = None,
    best: progress.BestArm | None = None,
) -> S.StudyProgress:
    """A study's public progress (``workers.progress``); ``snap`` when already read. A study
    deleted meanwhile has none (empty counts): a caller walking a list never fails on it."""
    if snap is None:
        snap = progress.snapshot(repo.db, study_id)
        if snap is None:
            return S.StudyProgress()
    return public_progress(snap.progress(best))


def public_progress(p: progress.Progress) -> S.StudyProgress:
    """``workers.progress.Progress`` as the API's StudyProgress."""
    return S.StudyProgress(
        state=p.state,
        total=p.total,
        **{status.lower(): p.counts[status] for status in TRIAL_STATUSES},  # a field per status
        finished=p.finished,
        fraction=p.fraction,
        throughput_per_min=p.throughput_per_min,
        window_trials=p.window_trials,
        last_finished_at=p.last_finished_at,
        eta_s=p.eta_s,
        eta_at=p.eta_at,
        best=None if p.best is None else S.BestArm(**asdict(p.best)),
        reused=p.reused,
    )


def _study_public(
    state: ServiceState,
    row: Mapping[str, Any],
    snap: progress.Snapshot | None = None,
    best: progress.BestArm | None = None,
) -> S.StudyPublic:
    """The study's public row; its status and progress from one snapshot (``snap``, read now
    when None), so the status never disagrees with the counts beside it."""
    if snap is None:
        snap = progress.snapshot(state.db, row["id"])
        if snap is None:
            raise not_found("study", row["id"])
    spec = row["spec"]
    unreadable = [] if isinstance(spec, Mapping) else ["spec"]  # corrupt: shown empty, named
    return S.StudyPublic(
        id=row["id"],
        kind=row["kind"],
        name=row.get("name"),
        proxy=row["proxy"],
        status=snap.status,
        spec=spec if isinstance(spec, Mapping) else {},
        unreadable=unreadable,
        created_at=row.get("created_at"),
        updated_at=snap.updated_at,
        progress=_progress(state.repo, row["id"], snap, best),
        tags=row.get("tags") or [],
        note=row.get("note"),
        archived=row.get("archived_at") is not None,
        running_in_background=bool(state.runner and state.runner.is_active(row["id"])),
    )


def __getattr__(name: str) -> Any:
    """``STUDY_PARAMS``: every params key some study kind reads (``workers.kinds``), computed on
    first use so that importing the API does not import the engine."""
    if name == "STUDY_PARAMS":
        from normfree.workers import kinds

        return kinds.param_names()
    raise AttributeError(name)


def validate_study(data: S.StudyCreate, stored: Stored | None = None) -> StudySpec:
    """Check a study request whole before anything is written (-> 422 with every problem):
    the one validation the CLI and ``driver.create_study`` use too (``workers.validation``),
    plus the API's size limit. ``stored``: the stored candidates a study may name; the
    returned spec has them baked in."""
    from normfree.workers import kinds
    from normfree.workers.validation import study_problems

    try:
        spec = StudySpec.model_validate(data.model_dump())
    except Exception as exc:
        raise ApiError(422, "invalid_study", str(exc)) from None
    # the size first: it costs nothing, and a study over it is not worth resolving cell by cell
    try:  # the most it may run: a search's extra seeds for its top arms included
        kind = kinds.get(spec.kind)
        n_trials = max(kind.trial_count(spec), kind.budget_trials(spec))
    except Exception:  # an unknown kind or bad params: the validation below says which
        n_trials = 0
    if n_trials > 2000:
        problem = f"the study has {n_trials} trials; the API's limit is 2000"
        raise ApiError(422, "invalid_study", problem, {"problems": [problem]})
    problems, spec = study_problems(spec, stored)
    if problems:
        raise ApiError(422, "invalid_study", "; ".join(problems), {"problems": problems})
    return spec


def create_study(
    state: ServiceState, data: S.StudyCreate, owner: Principal | None = None
) -> S.StudyPublic:
    """Validate, estimate and create a study owned by ``owner`` (the creating token), then hand
    it to the runner; all in this process (the REST route does the same in steps:
    :func:`check_request` and :func:`plan` in a worker process, the token's budget and
    :func:`created` here)."""
    from normfree.workers.validation import stored_names

    spec, estimate = _checked(state.settings, data, stored_names(state.repo))
    study_id = plan(state.settings, spec, owner.id if owner else None)
    return created(state, study_id, estimate)


def check_request(settings: Settings, data: S.StudyCreate) -> tuple[StudySpec, Any]:
    """In a worker process: the request against the registries, the stored candidates it
    names and the cost budget (formula parses, the trial plan): the spec and its estimate, or
    a 422 with every problem."""
    from normfree.workers.validation import stored_names

    return _checked(settings, data, stored_names(_worker_repo(settings)))


def _checked(settings: Settings, data: S.StudyCreate, stored: Stored) -> tuple[StudySpec, Any]:
    from normfree.workers.cost import check_study

    spec = validate_study(data, stored)
    try:
        estimate = check_study(spec, settings)  # params, overrides, dataset, cost budget
    except ValueError as exc:
        problems = str(exc).split("; ")
        raise ApiError(422, "invalid_study", str(exc), {"problems": problems}) from None
    return spec, estimate


_WORKER_REPOS: dict[str, RepositoryLike] = {}


def _worker_repo(settings: Settings) -> RepositoryLike:
    """A worker process's repository over the server's database (one per URL, kept)."""
    from normfree.api.services.state import open_repository

    repo = _WORKER_REPOS.get(settings.database_url)
    if repo is None:
        repo = _WORKER_REPOS[settings.database_url] = open_repository(settings, migrate=False)
    return repo


def plan(settings: Settings, spec: StudySpec, owner_token_id: int | None = None) -> int:
    """Write the study (owned by ``owner_token_id``), its planned trials and its Optuna study;
    its id. The REST route runs it in the server's thread pool (the checks before it, the
    parses, run in a worker process: api.offload)."""
    from normfree.workers.driver import create_study as engine_create_study

    try:
        return engine_create_study(
            spec, settings=settings, validated=True, owner_token_id=owner_token_id
        )
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
        # Planning validates everything the registries know (transform names, value types in
        # params, ...): the engine's reason is the message.
        raise ApiError(422, "invalid_study", f"the study cannot be planned: {exc}") from None


def created(state: ServiceState, study_id: int, estimate: Any) -> S.StudyPublic:
    """A planned study handed to the runner, as its public row with the estimate."""
    if state.runner is not None:
        state.runner.submit(study_id)
    row = state.repo.get_study(study_id)
    assert row is not None
    return _study_public(state, row).model_copy(update={"estimate": estimate.model_dump()})


def list_studies(
    state: ServiceState,
    *,
    status: str | None = None,
    kind: str | None = None,
    tag: str | None = None,
    archived: bool = False,
) -> S.StudyList:
    """Studies, newest first; archived ones only with ``archived``, only those tagged ``tag``
    when one is named."""
    rows = state.repo.list_studies(status=status, archived=archived, tag=tag)
    if kind:
        rows = [r for r in rows if r["kind"] == kind]
    items = []
    for r in rows:
        snap = progress.snapshot(state.db, r["id"])
        if snap is not None:  # deleted since the list was read
            items.append(_study_public(state, r, snap))
    return S.StudyList(count=len(items), items=items)


def _cells(
    trials: list[dict[str, Any]], spec: Mapping[str, Any]
) -> tuple[list[S.StudyCell], str | None, str]:
    """Aggregate a study's trials per arm (function x transform value / option combination)."""
    from normfree.api.services.leaderboards import public_failure
    from normfree.storage import failures, stats

    transform = spec.get("transform")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        # one function, one cell (``shift_h(erf, 0)`` is erf), as the leaderboards merge arms;
        # the best arm of the study's progress groups the same way
        _function, label, baseline, _value, _options = arm_of(t, transform)
        groups[(label, baseline)].append(t)
    objective = next((t.get("objective") for t in trials if t.get("objective")), None)
    direction = next((t.get("direction") for t in trials if t.get("direction")), "maximize")
    cells = []
    for ts in groups.values():
        arms = sorted({str(t["arm_key"]) for t in ts if t.get("arm_key")})
        function, label, baseline, value, ax = arm_of(ts[0], transform)
        summ = stats.summarize(_values_by_seed(ts))
        cells.append(
            S.StudyCell(
                function=function,
                label=label,
                value=float(value) if isinstance(value, int | float) else None,
                options=ax,
                baseline=baseline,
                n=summ.n,
                n_diverged=sum(t["status"] == "DIVERGED" for t in ts),
                n_failed=sum(t["status"] == "FAILED" for t in ts),
                n_total=len(ts),
                failure=public_failure(failures.most_common(ts)),
                mean=summ.mean,
                std=summ.std,
                ci_low=summ.low,
                ci_high=summ.high,
                arm_keys=arms,
                archived=all(t.get("archived") for t in ts),
            )
        )
    cells.sort(key=lambda c: (c.baseline, c.function, c.value if c.value is not None else 0.0))
    return cells, objective, direction


def _values_by_seed(trials: list[dict[str, Any]]) -> list[float]:
    """A cell's completed values: a seed run under two names of one function (``erf`` and
    ``shift_h(erf, 0)``) counts once, the plain name's value, as
    ``storage.leaderboard.merge_identities`` counts it."""
    from normfree.storage.leaderboard import identity

    done = [t for t in trials if t["status"] == "COMPLETE" and t.get("value") is not None]
    is_plain = [identity(t["candidate"]) == t["candidate"] for t in done]
    seeds = {t.get("seed") for t, p in zip(done, is_plain, strict=True) if p}
    return [
        t["value"] for t, p in zip(done, is_plain, strict=True) if p or t.get("seed") not in seeds
    ]


def _kind_report(state: ServiceState, kind: str, study_id: int) -> dict[str, Any] | None:
    """What the study's kind reports beyond its cells (a generate study's generations and
    property importance), non-finite values cleaned; None for kinds that report nothing.
    A search kind's importance is the one stored when its trials were written, looked up
    (``api.search_importance``, a lagging one refreshed in the background), never computed
    on this read: that takes seconds."""
    from functools import partial

    from normfree.api import search_importance
    from normfree.workers import kinds

    found = kinds.get(kind)
    source = partial(search_importance.lookup, state, study_id) if found.searches else None
    report = found.report(state.store, study_id, source)
    return None if report is None else finite(report)


def _kind_fields(kind: str, report: dict[str, Any] | None) -> dict[str, Any]:
    """The kind's report as ``report``, and under the StudyDetail field named after the kind
    where there is one (generate, search: their clients read it there)."""
    if report is None:
        return {}
    named = {kind: report} if kind in S.StudyDetail.model_fields else {}
    return {"report": report, **named}


def study_key(state: ServiceState, study_id: int) -> tuple[Any, dict[str, Any], progress.Snapshot]:
    """What a study's summary shows depends on, read cheaply; plus the row and the snapshot.

    A trial only moves forward (WAITING -> RUNNING -> a final status) and is never deleted, so the
    per-status counts change whenever a trial finishes or is added: with the study row's status
    and update time they say whether the cells (and the progress) changed. The status and the
    counts come from one read transaction (``workers.progress.snapshot``): read apart, a
    study finishing between the two reads showed "running" beside "14/14 finished".
    """
    row = state.repo.get_study(study_id)
    snap = progress.snapshot(state.db, study_id)
    if row is None or snap is None:
        raise not_found("study", study_id)
    return (study_id, *snap.key), row, snap


def _study_cells(
    state: ServiceState, key: Any, row: Mapping[str, Any]
) -> tuple[list[S.StudyCell], Any, Any, Any, list[str], progress.BestArm | None, Any]:
    """(cells, objective, direction, generate report, what could not be read, best arm, the
    cells' rank reliability) of a study, built once per ``key``."""

    def build() -> tuple[list[S.StudyCell], Any, Any, Any, list[str], progress.BestArm | None, Any]:
        from normfree.api import study_rows

        fields = (
            "candidate", "seed", "status", "axis_values", "objective", "direction", "value",
            "error", "failure", "arm_key", "archived",
        )  # fmt: skip
        with state.db.read() as conn:
            # no finite() over the rows: values are FiniteFloat columns (NULL when not finite)
            # and _cells keeps only finite axis values; walking 1,000 rows cost a third of
            # the build
            trials = study_rows.rows(conn, state.db.url, row["id"], fields)
        spec = row["spec"] if isinstance(row["spec"], Mapping) else {}
        trials, unreadable = _unreadable_axes(trials)
        cells, objective, direction = _cells(trials, spec)
        if objective is None:
            try:
                from normfree.workers.scheduling import objective_of

                objective, direction = objective_of(row["proxy"])
            except Exception:  # unknown proxy in an old study: leave the objective unnamed
                pass
        generate = _kind_report(state, row["kind"], row["id"])
        best = progress.best_arm(trials, spec.get("transform"), direction or "maximize")
        family = ("study", state.db.url, row["id"])
        rel = _cells_reliability(trials, spec.get("transform"), direction or "maximize", family)
        return cells, objective, direction, generate, unreadable, best, rel

    from normfree.api.search_importance import landed
    from normfree.workers import kinds

    # a refresh of the importance the generate report shows builds the cells again
    try:
        reports = type(kinds.get(row["kind"])).report is not kinds.StudyKind.report
    except Exception:  # a kind this version does not know: keyed by everything
        reports = True
    version = (key if reports else _finished_part(key), landed(state, row["id"]))
    return state.cache.get_or_build((("study-cells", row["id"]), version), build)


def _finished_part(key: Any) -> Any:
    """A study key (``study_key``: id, status, update time, counts per status) without what
    a lease or a hand-back moves: its waiting and running trials counted as one.

    Why: the cells, their reliability and the best arm read only finished trials (and the
    number of trials per arm), and a worker's lease of a trial is half of a study's commits; the
    cells (their reliability bootstrap 0.1-0.3 s at 1,000 trials) were built again at each.
    Not for kinds whose report may show trials in flight (generate, search)."""
    study_id, status, updated, counts = key
    finished = tuple((k, n) for k, n in counts if k in TERMINAL_TRIAL_STATUSES)
    unfinished = sum(n for k, n in counts if k not in TERMINAL_TRIAL_STATUSES)
    return (study_id, status, updated, (*finished, ("unfinished", unfinished)))


def _cells_reliability(
    trials: list[dict[str, Any]], transform: str | None, direction: str, family: Any = None
) -> S.ReliabilityPublic:
    """The split-seed rank reliability of a study's cells (arms grouped as the cells group
    them: ``workers.progress.arm_of``); a diverged seed ranks last, as in fidelity. ``family``
    names the study, so that a live study's interval carries over (``fidelity.reliability``)."""
    from normfree.api.services.leaderboards import reliability_public
    from normfree.fidelity.reliability import rank_reliability

    values: dict[str, dict[int, float | None]] = {}
    for t in trials:
        if t.get("status") not in ("COMPLETE", "DIVERGED") or t.get("seed") is None:
            continue
        v = t.get("value") if t["status"] == "COMPLETE" else None
        if t["status"] == "COMPLETE" and v is None:
            continue  # completed without the objective: says nothing
        arm = repr(progress.arm_of(t, transform))
        values.setdefault(arm, {})[int(t["seed"])] = v
    rel = rank_reliability(values, direction=direction, reuse=family)  # type: ignore[arg-type]
    return reliability_public(rel)


def _unreadable_axes(trials: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the trials, what could not be read): trials whose stored axis values are not a mapping
    (corrupt rows) read as having none (each then is a cell of its function alone), in copies
    (the rows are shared, ``api.study_rows``); named, so the study says what it could not read
    instead of failing whole."""
    bad = [t["id"] for t in trials if not isinstance(t.get("axis_values"), Mapping)]
    if not bad:
        return trials, []
    trials = [
        t if isinstance(t.get("axis_values"), Mapping) else {**t, "axis_values": {}} for t in trials
    ]
    shown = ", ".join(str(i) for i in bad[:5]) + (
        f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    )
    return trials, [f"axis_values (trial{'s' if len(bad) > 1 else ''} {shown})"]


def get_study(state: ServiceState, study_id: int, *, trials: bool = True) -> S.StudyDetail:
    """A study with progress and cells; ``trials`` adds every trial (use the paged list at scale:
    ``list_study_trials``)."""
    key, row, snap = study_key(state, study_id)
    cells, objective, direction, generate, unreadable, best, rel = _study_cells(state, key, row)
    pub = _study_public(state, row, snap, best)
    pub = pub.model_copy(update={"unreadable": [*pub.unreadable, *unreadable]})
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
        **_kind_fields(row["kind"], generate),
        cells=cells,
        reliability=rel,
        caveats=_cells_caveats(row["proxy"], cells, objective),
        trials=listed,
        archived_arms=sorted({k for c in cells if c.archived for k in c.arm_keys}),
    )


def _cells_caveats(proxy: str, cells: list[S.StudyCell], objective: str | None) -> S.BoardCaveats:
    """A study's cells read with the care a leaderboard's arms are (``board_caveats``)."""
    from normfree.fidelity.caveats import board_caveats

    rows = [
        {
            "label": c.label,
            # the function's own entry names a heavy-tailed slope; a transformed cell (a value)
            # is another function, whose properties the cell does not carry
            "candidate": c.function if c.value is None else None,
            "n": c.n,
            "mean": c.mean,
            "objective": objective,
        }
        for c in cells
    ]
    return S.BoardCaveats(**board_caveats(proxy, rows))


def study_without_cells(state: ServiceState, study_id: int) -> S.StudyDetail:
    """The study, its status and progress without its cells: what a page still shows when the
    cells cannot be built from its stored trials."""
    _key, row, snap = study_key(state, study_id)
    return S.StudyDetail(**_study_public(state, row, snap).model_dump(), cells=[], trials=[])


def _trial_summary(t: Mapping[str, Any]) -> S.TrialSummary:
    unreadable: list[str] = []  # axis_values is NOT NULL: None is text that was not JSON
    axes = readable_mapping(t.get("axis_values"), "axis_values", unreadable)
    return S.TrialSummary(
        id=t["id"],
        candidate=t["candidate"],
        seed=t["seed"],
        status=t["status"],
        attempt=t.get("attempt", 0),
        axis_values=axes,
        objective_value=t.get("value"),
        reused_from=t.get("reused_from"),
        unreadable=unreadable,
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
            after = db_int(cursor, "cursor")
        except ApiError:
            raise ApiError(422, "invalid_cursor", "cursor: pass back a next_cursor") from None
    with state.db.read() as conn:
        rows, nxt = reads.trial_page(conn, study_id, after=after, limit=limit, status=status)
    items = [_trial_summary(t) for t in finite(rows)]
    return S.TrialPage(count=len(items), items=items, next_cursor=str(nxt) if nxt else None)


def control_study(
    state: ServiceState, study_id: int, action: str, who: Principal | None = None
) -> S.StudyPublic:
    """Pause, resume or cancel through the one state machine (``workers.lifecycle``).

    ``who``: the requesting token; 403 unless it created the study or is an admin token (None:
    an internal caller, not checked). Resuming a study that this process has no driver for
    (left pending or running by a stopped server, or failed) restarts one: the driver requeues
    trials whose leases expired.
    """
    from normfree.api.deps import require_owner
    from normfree.workers import lifecycle

    if who is not None:
        row = state.repo.get_study(study_id)
        if row is None:
            raise not_found("study", study_id)
        require_owner(who, row.get("owner_token_id"), f"study {study_id}")
        if row.get("archived_at") is not None:
            raise ApiError(
                409, "conflict", f"study {study_id} is archived: restore it (unarchive) first"
            )

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


def delete_study(
    state: ServiceState, study_id: int, who: Principal, *, dry_run: bool = False
) -> S.StudyDeleted:
    """Delete a finished study, its trials and its Optuna study: 404 when none, 403 unless
    ``who`` created it or is an admin token, 409 unless it is cancelled, complete or failed
    with no trial running. The leaderboards of its proxy are folded again without it. The
    answer lists what was removed; ``dry_run`` lists it and removes nothing."""
    from normfree.api.deps import require_owner
    from normfree.storage.studies import StudyBusy

    row = state.repo.get_study(study_id)
    if row is None:
        raise not_found("study", study_id)
    require_owner(who, row.get("owner_token_id"), f"study {study_id}")
    try:
        removes = S.Removal(**state.repo.study_removal(study_id))
    except KeyError:
        raise not_found("study", study_id) from None
    if dry_run:
        return S.StudyDeleted(id=study_id, deleted=False, dry_run=True, removes=removes)
    try:
        optuna_name = state.repo.delete_finished_study(study_id)
    except KeyError:
        raise not_found("study", study_id) from None
    except StudyBusy as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    drop_optuna_study(state.store, optuna_name)
    return S.StudyDeleted(id=study_id, removes=removes)


def drop_optuna_study(store: Any, optuna_name: str | None) -> None:
    """Delete a deleted study's Optuna study (another database: after our rows are gone, so a
    failure here leaves a sampler history no row points at, never a row without its study)."""
    if not optuna_name:
        return
    import optuna

    try:
        optuna.delete_study(study_name=optuna_name, storage=store.optuna_storage())
    except Exception:  # never created, or gone: our rows are what the API shows
        log.info("no Optuna study %s to delete", optuna_name, exc_info=True)
