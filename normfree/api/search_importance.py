"""The search view's property importance, looked up instead of computed on a read.

The driver stores a study's importance when a trial finishes (``storage.study_documents``);
this module finds it for ``api.search``. The answer is never older than the data without
saying so: a stored document whose outcome counts differ from the study's now is served
marked ``stale`` and recomputed once in a background thread (then stored again, so the next
start finds it), after which the view's key (:func:`mark`) changes and the view is rebuilt.
A study with no stored document (finished before this existed, or its driver could not store
it) goes the same way. No request ever waits for scipy, sympy or the resolver.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Hashable, Mapping
from typing import Any

from normfree.api.services.state import ServiceState
from normfree.storage.db import optuna_study_name
from normfree.storage.study_documents import IMPORTANCE_ATTR, OptunaDocuments, outcome_counts

__all__ = ["epoch", "landed", "lookup", "mark", "refreshes_running"]

log = logging.getLogger(__name__)


class _Importances:
    """One server's view of the stored documents: the latest seen per study, the refreshes
    running, and the reader of Optuna's storage."""

    def __init__(self, state: ServiceState) -> None:
        self.reader = OptunaDocuments(state.store.optuna_url)
        self.known: dict[int, dict[str, Any]] = {}
        self.refreshing: set[int] = set()
        self.looked: set[int] = set()  # studies whose stored document this server read once
        self.landed: dict[int, int] = {}  # per study: refreshes landed (see :func:`landed`)
        self.lock = threading.Lock()


# Keyed by the state's response cache: one per server (the state itself, a dataclass, is not
# hashable), dropped with it.
_BY_SERVER: weakref.WeakKeyDictionary[Any, _Importances] = weakref.WeakKeyDictionary()
_GLOBAL = threading.Lock()
# Refreshes landed in this process: part of the fast lane's local stamp (``api.fastlane``),
# since a refresh changes an answer without a commit to our database.
_EPOCH = [0]


def epoch() -> int:
    """How many importance refreshes have landed in this process."""
    return _EPOCH[0]


def _of(state: ServiceState) -> _Importances:
    with _GLOBAL:
        found = _BY_SERVER.get(state.cache)
        if found is None:
            found = _BY_SERVER[state.cache] = _Importances(state)
        return found


def mark(state: ServiceState, study_id: int) -> Hashable:
    """What the view's cache key adds for importance: the counts of the document this server
    holds for the study (a dict lookup; the stored one is read once per study and server
    start). It changes when a newer document lands, so a view built with a stale importance
    is not served after a fresh one exists."""
    imps = _of(state)
    if study_id not in imps.looked:
        stored = imps.reader.importance(optuna_study_name(study_id))
        with imps.lock:
            imps.looked.add(study_id)
            if stored is not None and study_id not in imps.known:
                imps.known[study_id] = stored
    doc = imps.known.get(study_id)
    return None if doc is None else tuple(sorted(doc["counts"].items()))


def landed(state: ServiceState, study_id: int) -> int:
    """How many refreshes of the study's importance landed in this server: part of the keys
    of its summary and page (``api.reads.study_key``), whose generate report shows the
    importance. A refresh changes what they show without a write to our database; a dict
    lookup, no query (a study that never needed one: 0)."""
    return _of(state).landed.get(study_id, 0)


def refreshes_running(state: ServiceState) -> int:
    """How many studies' importance is being recomputed now (tests and benchmarks wait on it)."""
    return len(_of(state).refreshing)


def lookup(
    state: ServiceState, study_id: int, counts: Mapping[str, int]
) -> tuple[dict[str, Any] | None, bool]:
    """``(importance, stale)`` for a study whose per-status counts are ``counts``.

    Fresh: the stored document was computed from these very counts. Stale: it was computed
    from other counts (trials finished since) or none is stored; whatever is stored is
    returned and a background refresh is started. A study with no finished trial has none."""
    imps = _of(state)
    optuna_name = optuna_study_name(study_id)
    want = outcome_counts(counts)
    doc = imps.known.get(study_id)
    if doc is None or doc["counts"] != want:
        stored = imps.reader.importance(optuna_name)
        if stored is not None and (doc is None or stored["counts"] == want):
            with imps.lock:
                imps.known[study_id] = doc = stored
    if doc is not None and doc["counts"] == want:
        return doc.get("importance"), False
    if not any(want.values()):
        return None, False
    _refresh(state, imps, study_id, optuna_name)
    return (doc or {}).get("importance"), True


def _refresh(state: ServiceState, imps: _Importances, study_id: int, optuna_name: str) -> None:
    with imps.lock:
        if study_id in imps.refreshing:
            return
        imps.refreshing.add(study_id)

    def run() -> None:
        try:
            from normfree.workers.importance import importance_with_counts

            doc = importance_with_counts(state.repo, study_id)
            with imps.lock:
                imps.known[study_id] = doc
                imps.landed[study_id] = imps.landed.get(study_id, 0) + 1
                _EPOCH[0] += 1
            _store(state, optuna_name, doc)
        except Exception:
            log.warning("study %s: importance refresh failed", study_id, exc_info=True)
        finally:
            with imps.lock:
                imps.refreshing.discard(study_id)

    threading.Thread(target=run, name=f"importance-{study_id}", daemon=True).start()


def _store(state: ServiceState, optuna_name: str, doc: Mapping[str, Any]) -> None:
    """Keep a refreshed document where the next start finds it (the study's Optuna study)."""
    import optuna

    try:
        study = optuna.load_study(study_name=optuna_name, storage=state.store.optuna_storage())
    except KeyError:  # no Optuna study (yet): the driver stores it when it runs
        return
    study.set_user_attr(IMPORTANCE_ATTR, dict(doc))
