"""Submission prescreens, run after the answer.

A prescreen trains the tiny proxy for a few seconds; inside ``POST /api/candidates`` it would
make every new function's submission take seconds and 32 clients queue behind one CPU. So the
submission answers at once: with the prescreen when this process already knows it for the
function (it is deterministic, cached per fingerprint), else ``202 Accepted`` with
``prescreen.status = "pending"`` and a ``Location`` to the candidate, and the prescreen runs on
one background thread (one at a time: each is seconds of CPU; more would only queue). Its result
is written on the stored candidate (``candidates.prescreen``), so any API process shows it, and
kept in this process's cache for later submissions of the same function.

A stored candidate's prescreen is written ``pending`` with the row itself, so a server killed
before the prescreen ended leaves it visibly unfinished: the next start re-queues every such
prescreen (:func:`requeue_interrupted`), and resubmitting the formula asks for it again. Every
process of ``serve --workers N`` re-queues at its start, so each prescreen is claimed first
(``Repository.claim_prescreen``, one conditional UPDATE): only the process that wins runs it,
and a claim whose process is gone (:func:`claimant_gone`) or older than :data:`CLAIM_LEASE` is
taken again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from normfree.api import schemas as S
from normfree.api import services

log = logging.getLogger(__name__)

_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="normfree-prescreen")
_LOCK = threading.Lock()
# fingerprint -> (the running job, names of stored candidates to write its result on)
_PENDING: dict[str, tuple[Future[Any], set[str]]] = {}
# Moves whenever a prescreen starts or ends here: a candidate's cached answer shows this
# process's pending and finished prescreens, which no database write announces.
_EPOCH = [0]
# Who claims a prescreen: this process, told apart from a restarted one with the same pid.
CLAIMANT = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
# How long a claim holds when nothing says its process died: a live claimant ends a prescreen
# (seconds of CPU, one at a time) well within it; an older claim is taken again.
CLAIM_LEASE = timedelta(minutes=15)


def claimant_gone(holder: str) -> bool:
    """Whether the process that claimed a prescreen (``host:pid:nonce``) is known dead: on this
    host, no process has its pid. Another host's claimant is left to :data:`CLAIM_LEASE`."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    if holder == CLAIMANT:
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def epoch() -> tuple[int, int]:
    """What this process's prescreens look like to a reader: a part of a candidate's cache key
    (and the fast lane's local stamp)."""
    return _EPOCH[0], services.prescreens_known()


def pending(status: str = "pending") -> S.PrescreenPublic:
    return S.PrescreenPublic(status=status, ok=False, proxy=services.PRESCREEN_PROXY)  # type: ignore[arg-type]


def request(state: services.ServiceState, cand: Any, store_as: str | None) -> S.PrescreenPublic:
    """The prescreen of ``cand``'s function if known, else start it in the background.

    ``store_as``: the stored candidate to record the result on (None for a duplicate, which is
    not stored). Returns the result or a ``pending`` placeholder.
    """
    known = services.cached_prescreen(cand.fingerprint)
    if known is not None:
        if store_as:
            _store(state, store_as, known)
        return known
    with _LOCK:
        job = _PENDING.get(cand.fingerprint)
        if job is not None:
            if store_as:
                job[1].add(store_as)
            return pending()
        names = {store_as} if store_as else set()
        future = _EXECUTOR.submit(_run, state, cand)
        _PENDING[cand.fingerprint] = (future, names)
        _EPOCH[0] += 1
    return pending()


def _run(state: services.ServiceState, cand: Any) -> S.PrescreenPublic:
    """Run, store on the waiting candidates, and only then answer it as known: a client that
    sees the prescreen done (this process's cache) finds it stored too, from any process."""
    out = S.PrescreenPublic(ok=False, status="failed", error="prescreen did not finish")
    try:
        out = services.run_prescreen_uncached(cand)  # never raises: a crash is in ``error``
        if out.error is not None:
            out = out.model_copy(update={"status": "failed"})
        with _LOCK:
            names = set(_PENDING.get(cand.fingerprint, (None, set()))[1])
        for name in sorted(names):
            _store(state, name, out)
        services.remember_prescreen(cand.fingerprint, out)
    finally:
        with _LOCK:
            _future, later = _PENDING.pop(cand.fingerprint, (None, set()))
            _EPOCH[0] += 1
    for name in sorted(later - names):  # added while the first ones were stored
        _store(state, name, out)
    return out


def _store(state: services.ServiceState, name: str, result: S.PrescreenPublic) -> None:
    try:
        state.repo.set_candidate_prescreen(name, result.model_dump(mode="json"))
    except Exception:  # the server may be shutting down; the answer was already given
        log.warning("could not store the prescreen of %s", name, exc_info=True)


def status(
    state: services.ServiceState,
    stored: dict[str, Any] | None,
    fingerprint: str | None,
    unreadable: list[str] | None = None,
):
    """What a candidate's page shows: its stored prescreen, this process's, or "pending".

    A stored prescreen that is not one (a corrupt row) is skipped, named in ``unreadable``."""
    if stored and stored.get("prescreen"):
        try:
            return S.PrescreenPublic.model_validate(stored["prescreen"])
        except ValidationError:
            log.warning("candidate %s: stored prescreen unreadable", stored.get("name"))
            if unreadable is not None:
                unreadable.append("prescreen")
    known = services.cached_prescreen(fingerprint)
    if known is not None:
        return known
    with _LOCK:
        if fingerprint in _PENDING:
            return pending()
    return None


def requeue_interrupted(state: services.ServiceState) -> list[str]:
    """Start again every stored prescreen left ``pending`` (by a process that died before it
    ended); returns the candidates' names. Runs at a server's start, off the event loop."""
    from normfree.search_space import ExpressionError, parse

    names: list[str] = []
    for row in state.repo.list_candidates():
        stored = row.get("prescreen")
        if not (isinstance(stored, dict) and stored.get("status") == "pending"):
            continue
        name = str(row["name"])
        with _LOCK:
            running = any(name in waiting for _f, waiting in _PENDING.values())
        if running or not state.repo.claim_prescreen(name, CLAIMANT, CLAIM_LEASE, claimant_gone):
            continue  # this process runs it already, or another process claimed it
        try:
            cand = parse(str(row.get("formula") or ""), name=name)
        except (ExpressionError, RecursionError, ValueError) as exc:
            failed = S.PrescreenPublic(
                ok=False, status="failed", proxy=services.PRESCREEN_PROXY, error=str(exc)[:500]
            )
            _store(state, name, failed)
            continue
        request(state, cand, name)
        names.append(name)
    if names:
        log.info("re-queued %d interrupted prescreens: %s", len(names), ", ".join(names[:20]))
    return names
