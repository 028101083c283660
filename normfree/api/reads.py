"""The API's cached reads: what each one depends on (its key) and where it is built.

A key holds the request's parameters and the versions of the data the answer shows, read in one
small query per request (``api.cache`` explains why that is never stale). The builders are the
ordinary service functions; this module only decides what may be reused:

- a leaderboard: the proxy's read version (bumped when one of its trials finishes), the
  candidates' version (groups and properties are shown), the database's identity, and how many
  function analyses this process has done (``api.enrich``);
- the candidate list: the candidates' version;
- one candidate: :func:`candidate_key`;
- the reference-set list: the references' version (``storage.references.READ_SCOPE``);
- a study's summary and page: ``services.study_key`` (status, update time, per-status counts);
- a trial: its status and ``updated_at`` (every write to it moves the pair).

Also here: which leaderboard rows belong to a candidate (its page and ``/results``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

import anyio.to_thread
from starlette.concurrency import run_in_threadpool

from normfree.api import fastlane, lines, search_importance, services
from normfree.api import schemas as S
from normfree.api.errors import not_found
from normfree.jsonsafe import finite
from normfree.storage import db, reads

T = TypeVar("T")
Key = tuple[Hashable, Hashable]  # (family: what is shown, version: what it depends on)


def _versions(conn: Any, *scopes: str) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(reads.versions(conn, [*scopes, "database"]).items()))


class GenerationMemo:
    """The database reads of keys, kept for the database generation they were read at.

    Why: under a writer (five commits a second, 32 readers) the event loop spent half its time
    in the small version queries of keys (a board's read versions, a study's stamp, the proxies
    with results), and each query gives the GIL up and waits to take it back from the builds
    (bench/results/live_reads.md). Between two commits the answers are the same: a request that
    took the fast lane carries the generation read at its start (``fastlane.GENERATION``), and a
    read done for that generation serves every later request at the same one. Safe because the
    generation is read before the query: a value kept under it is at least as new as it, and a
    commit after it moves the generation of every later request. Requests without one (a token,
    a conditional request, tests' direct calls) read as before.
    """

    MAX_ENTRIES = 4096
    # How long a request waits for the same read at the same generation in flight on another
    # thread before reading itself (a round trip takes a few ms; a stuck one must not hold all).
    SHARE_WAIT_S = 2.0

    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, tuple[Hashable, Any]] = OrderedDict()
        self._flights: dict[tuple[Hashable, Hashable], Future[Any]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.shared = 0  # of the hits, those that waited for a read in flight

    def read(self, what: Hashable, fn: Callable[[], T]) -> T:
        """``fn()``, or its value read at this request's generation by an earlier request or
        by one in flight now. Sharing the read in flight matters on PostgreSQL: after a commit
        the readers of one key arrive together, and each of their round trips held a thread
        that the others queued for (bench/results/live_reads.md)."""
        generation = fastlane.GENERATION.get()
        if generation is None:
            return fn()
        with self._lock:
            held = self._entries.get(what)
            if held is not None and held[0] == generation:
                self._entries.move_to_end(what)
                self.hits += 1
                return held[1]  # type: ignore[no-any-return]
            flight = self._flights.get((what, generation))
            if not db.io_allowed():  # on the event loop: only what is held (small_read)
                raise db.WouldBlock(flight)
            lead = flight is None
            if flight is None:  # (not ``if lead``: this narrows flight's type)
                flight = self._flights[(what, generation)] = Future()
        if not lead:
            try:
                value = flight.result(timeout=self.SHARE_WAIT_S)
            except Exception:  # the leader failed or is stuck: read as without it
                return fn()
            with self._lock:
                self.hits += 1
                self.shared += 1
            return value  # type: ignore[no-any-return]
        try:
            value = fn()
        except BaseException as exc:
            with self._lock:
                self._flights.pop((what, generation), None)
            flight.set_exception(exc)
            raise
        with self._lock:
            self._flights.pop((what, generation), None)
            self._entries[what] = (generation, value)
            self._entries.move_to_end(what)
            while len(self._entries) > self.MAX_ENTRIES:
                self._entries.popitem(last=False)
        flight.set_result(value)
        return value


def at_generation(state: services.ServiceState, what: Hashable, fn: Callable[[], T]) -> T:
    """``fn()``, a read of the database only, or its value kept for this request's generation."""
    return state.generation_memo.read(what, fn)


def _read_versions(state: services.ServiceState, *scopes: str) -> tuple[tuple[str, int], ...]:
    def read() -> tuple[tuple[str, int], ...]:
        with state.db.read() as conn:
            return _versions(conn, *scopes)

    return at_generation(state, ("versions", scopes), read)


async def small_read(state: services.ServiceState, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``: a small read (a key's version query, one trial by id), where it costs
    least.

    On SQLite it runs on the event loop: a millisecond at most, inside this process, never
    waiting on a writer (WAL); in the thread pool the hand-off and the GIL passing between
    threads cost more than the read (a trial read under 32 clients: 4.8 ms of server CPU).
    On a server database it is a round trip to another process, which on a small
    machine waits for that process to be scheduled: run on the loop, every request in flight
    waited too (PostgreSQL leaderboard p99 462 ms at 32 clients, bench/results/read_scale.md),
    so it goes to threads of its own (``settings.server_read_threads``), one hand-off per
    request: not the two of :func:`quick`, whose work holds the GIL, where 32 readers queued
    behind each other's round trips.
    """
    if state.db.is_sqlite:
        return fn(*args)
    # First on the loop, from memory only: most key reads after a commit find their value kept
    # for this generation by the request before (GenerationMemo), or in flight on a thread
    # (awaited here, once); only a real database read takes a thread.
    for attempt in range(2):
        try:
            with db.without_io():
                return fn(*args)
        except db.WouldBlock as blocked:
            if blocked.pending is None or attempt:
                break
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(blocked.pending)),
                    GenerationMemo.SHARE_WAIT_S,
                )
    return await _in_threads(state.read_limiter, fn, *args)


async def quick(state: services.ServiceState, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread of the short-work limiter (``settings.quick_threads``): for
    blocking work of a millisecond or so, which must not queue behind a slow build in the
    default pool, and which more threads would only slow (they take turns on the GIL)."""
    return await _in_threads(state.quick_limiter, fn, *args)


async def _in_threads(limiter: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread under ``limiter``; None (before the app's start made the
    limiters) takes anyio's default pool."""
    if limiter is None:
        return await run_in_threadpool(fn, *args)
    return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=limiter)


def derived(kind: str, key: Key, *extra: Hashable) -> Key:
    """The key of something built from ``key``'s data (a page, a model, a figure)."""
    return ((kind, key[0], *extra), key[1])


def leaderboard_key(
    state: services.ServiceState,
    proxy: str,
    group: str | None = None,
    properties: list[str] | None = None,
    study_id: int | None = None,
    archived: bool = False,
) -> Key:
    """What ``services.leaderboard(proxy, ...)`` shows depends on (archiving or restoring a
    study or an arm refolds its proxy: a bump of ``proxy:<name>``)."""
    versions = _read_versions(state, f"proxy:{proxy}", "candidates")
    # the analyses of its functions done so far (api.enrich): a board refreshes as they finish
    # and its fidelity line done so far (api.lines)
    line = (
        lines.study_target(state, study_id)
        if study_id is not None
        else lines.proxy_target(state, proxy)
    )
    epoch = (services.ENRICHER.epoch, lines.LINES.stamp(line))
    params = (proxy, group or None, tuple(properties or ()), study_id) + (
        ("archived",) if archived else ()
    )
    return (("leaderboard", *params), (versions, epoch))


def leaderboard(
    state: services.ServiceState,
    proxy: str,
    *,
    group: str | None = None,
    properties: list[str] | None = None,
    study_id: int | None = None,
    key: Key | None = None,
    archived: bool = False,
    line: bool = True,
) -> S.LeaderboardPublic:
    """``services.leaderboard``, built once per key; its ranked rows once per key without the
    fidelity line's stamp (a line landing re-attaches the line, it does not rank again).
    ``line=False``: the ranked board alone, with no fidelity line asked for (an export: its
    files hold the rows, and in a command a line asked for was computed on a thread that the
    process's exit cut short)."""
    key = key or leaderboard_key(state, proxy, group, properties, study_id, archived)
    versions, (enriched, _line) = key[1]
    ranked = state.cache.get_or_build(
        derived("leaderboard-rows", (key[0], (versions, enriched))),
        lambda: services.leaderboard(
            state,
            proxy,
            group=group,
            properties=properties,
            study_id=study_id,
            archived=archived,
            line=False,
        ),
    )
    if not line:
        return ranked
    return state.cache.get_or_build(
        derived("leaderboard-model", key),
        lambda: services.with_line(state, ranked, study_id),
    )


def candidates_key(state: services.ServiceState, *params: Any) -> Key:
    return (("candidates", params), _read_versions(state, "candidates"))


def candidate_key(state: services.ServiceState, name: str) -> Key:
    """One candidate's answer (``GET /api/candidates/{name}`` and its page): the candidates'
    version (the row, duplicates), its own (its stored prescreen), every proxy's board (its
    results), the function analyses done and this process's prescreens."""
    from normfree.api import prescreens

    with state.db.read() as conn:
        found = reads.versions_with_proxies(conn, ["candidates", f"candidate:{name}", "database"])
    versions = tuple(sorted(found.items()))
    return (("candidate", name), (versions, services.ENRICHER.epoch, prescreens.epoch()))


def references_key(state: services.ServiceState) -> Key:
    """The reference-set list's key: the version every stored or deleted set moves (read after
    this process's first check of the built-in set, which may store it: a bump)."""
    from normfree.storage.references import READ_SCOPE, ReferenceStore, builtin_checked

    if not builtin_checked(state.db):
        ReferenceStore(state.db).ensure_builtin()
    with state.db.read() as conn:
        return (("references",), _versions(conn, READ_SCOPE))


def candidates(
    state: services.ServiceState,
    *,
    group: str | None = None,
    properties: list[str] | None = None,
    source: str | None = None,
    q: str | None = None,
    key: Key | None = None,
    archived: bool = False,
) -> S.CandidateList:
    """``services.list_candidates``, built once per key."""
    params = (group, tuple(properties or ()), source, q) + (("archived",) if archived else ())
    key = key or candidates_key(state, *params)
    return state.cache.get_or_build(
        derived("candidates-model", key),
        lambda: services.list_candidates(
            state, group=group, properties=properties, source=source, q=q, archived=archived
        ),
    )


def candidate_groups(state: services.ServiceState) -> list[str]:
    """The groups a board can be filtered by: the catalog's (from its table, no candidate
    built: building the catalog is seconds of sympy, which the first board page after a start
    waited for) and the stored candidates'."""
    from normfree.search_space import catalog

    stored = {r.get("group") for r in state.repo.list_candidates()}
    return sorted({e.group for e in catalog.ENTRIES} | {str(g) for g in stored if g})


def trial_read(state: services.ServiceState, trial_id: int) -> tuple[Key, dict[str, Any]]:
    """A trial and its key (its status and ``updated_at``: every write to it moves the pair,
    and both come with the trial's own row, so key and body always agree). The trial has no
    NaN or infinity left (``services.trial_public(..., finite_already=True)``)."""
    # a finished trial's stored document is one statement, read outside a transaction (one
    # round trip on PostgreSQL instead of three); a trial still running is built in one
    with state.db.read_one() as conn:
        found, t = reads.stored_trial_detail(conn, trial_id, finite=True)
        identity = _identity(state, conn)
    if found and t is None:
        with state.db.read() as conn:
            t = finite(reads.trial_detail(conn, trial_id))
    if t is None:
        raise not_found("trial", trial_id)
    return trial_key(trial_id, t, identity), t


def trial_key(trial_id: int, t: dict[str, Any], identity: Hashable) -> Key:
    """A trial's key: its own stamp and the database's identity."""
    return (("trial", trial_id), ((t["status"], t["updated_at"]), identity))


def known_identity(state: services.ServiceState) -> Hashable | None:
    """The database's identity if this process has read it (:func:`_identity`), else None."""
    return _IDENTITIES.get(state.db.url)


_IDENTITIES: dict[str, tuple[tuple[str, int], ...]] = {}


def _identity(state: services.ServiceState, conn: Any) -> tuple[tuple[str, int], ...]:
    """The database's identity (its ``database`` read version: a random number migration 0006
    sets and nothing bumps), read once per process and database: a trial's key needs nothing
    else beside the trial's own stamp, and the query was a quarter of a trial's read."""
    identity = _IDENTITIES.get(state.db.url)
    if identity is None:
        identity = _IDENTITIES[state.db.url] = _versions(conn)
    return identity


def study_key(state: services.ServiceState, study_id: int) -> Key:
    """A study's summary, page and figure: its status, update time and per-status counts (see
    ``services.study_key``), and whether this process drives it."""

    def read() -> tuple[Any, tuple[tuple[str, int], ...]]:
        with state.db.read() as conn:
            return reads.study_stamp(conn, study_id), _identity(state, conn)

    stamp, versions = at_generation(state, ("study", study_id), read)
    if stamp is None:
        raise not_found("study", study_id)
    active = bool(state.runner and state.runner.is_active(study_id))
    line = lines.LINES.stamp(lines.study_target(state, study_id))
    # a refresh of a search's importance (shown by a generate study's report) moves it too
    imp = search_importance.landed(state, study_id)
    return (("study", study_id), (stamp, active, versions, line, imp))


def study_summary(state: services.ServiceState, study_id: int, key: Key) -> Any:
    """``services.get_study(trials=False)``, built once per study key (``key`` or one derived
    from it): the summary, a page with trials and the study page share one build."""
    study = (("study", study_id), key[1])
    return state.cache.get_or_build(
        derived("study-model", study),
        lambda: services.get_study(state, study_id, trials=False),
    )


def driven(key: Key) -> bool:
    """Whether a study's key (or one derived from it) says this process drives the study: its
    answer then also follows the driver, which the fast lane cannot see (``api.fastlane``)."""
    return bool(key[1][1])


# -- a candidate's results ------------------------------------------------------------------------


def _mentions(names: set[str]) -> Callable[[str], bool]:
    """Whether an arm's name is a call that takes one of ``names`` as a function argument
    (``shift_v(softsign15, 1)``; not ``erf(u)``, a primitive in a formula)."""
    words = [re.compile(rf"(?<![\w.]){re.escape(n)}(?![\w(])") for n in names]
    return lambda arm: "(" in arm and any(w.search(arm) for w in words)


def same_function_names(
    state: services.ServiceState, name: str, fingerprint: str | None, arm_names: set[str]
) -> set[str]:
    """Names under which ``name``'s function ran: itself, catalog entries and stored candidates
    with its fingerprint, and transform calls of any of those that compute the same values
    (``shift_h(erf, 0)`` is erf). Only arm names that mention one of the names are resolved, so
    the cost is a few cached parses, not one per arm."""
    names = {name}
    if not fingerprint:
        return names
    names |= {c.name for c in services._catalog_public() if c.fingerprint == fingerprint}
    stored = {r["name"]: r["formula"] for r in state.repo.list_candidates(fingerprint=fingerprint)}
    names |= set(stored)
    mentions = _mentions(names)
    definitions = tuple(sorted(stored.items()))
    for arm in sorted(arm_names - names):
        if not mentions(arm):
            continue
        cand = _resolve_with(arm, definitions)
        if cand is not None and cand.fingerprint == fingerprint:
            names.add(arm)
    return names


@functools.lru_cache(maxsize=4096)
def _resolve_with(arm: str, definitions: tuple[tuple[str, str], ...]) -> Any:
    """``arm`` resolved with the stored candidates ``definitions`` (name, formula) known, so that
    ``shift_v(mine, 0)`` is seen to be ``mine``; None where it does not resolve."""
    if not definitions:
        return services._resolve_cached(arm)
    from normfree.search_space import resolver

    try:
        return resolver.resolve(arm, resolver.Stored(formula=dict(definitions).get))
    except Exception:  # odd stored text is "not the same function", never a failed page
        return None


def candidate_rows(
    state: services.ServiceState, name: str, fingerprint: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The leaderboard rows, across proxies, of every arm that runs ``name``'s function, and
    apart from them the rows of arms built on it that compute other values: its transforms
    (``shift_v(f, 1)``, ``flat_centre(f, 0.5)``), failed ones included. Why the second list: a
    property study of a function trains only such arms; without them the function's page would
    not show that the study ran, or that it failed.

    Matched on the arm's stored norm name (``LeaderboardRow.function``), never on its label: a
    label carries the arm's options (``erf [shift=scalar]``) and still is erf's result.
    """
    with state.db.read() as conn:
        pairs = reads.arm_candidates(conn)
    same = same_function_names(state, name, fingerprint, {c for _p, c in pairs})
    mentions = _mentions(same)
    own: list[dict[str, Any]] = []
    derived: list[dict[str, Any]] = []
    for proxy in sorted({p for p, c in pairs if c in same or mentions(c)}):
        board = leaderboard(state, proxy)
        # the board's own verdict on arms ending near chance, shown beside each row here too
        chance = set(board.caveats.near_chance) if board.caveats else set()
        for row in board.rows:
            if row.function in same:
                rows = own
            elif mentions(row.function):
                rows = derived
            else:
                continue
            rows.append(
                {
                    "proxy": proxy,
                    "objective": board.objective,
                    "near_chance": row.candidate in chance,
                    **row.model_dump(),
                }
            )
    return own, derived


def candidate_results(
    state: services.ServiceState, name: str, fingerprint: str | None = None
) -> list[dict[str, Any]]:
    """The leaderboard rows, across proxies, of every arm that runs ``name``'s function (the
    first list of :func:`candidate_rows`)."""
    return candidate_rows(state, name, fingerprint)[0]
