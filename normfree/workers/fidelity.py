"""Fidelity of a proxy (or a study) against a stored reference set: storage in, report out.

The one place that joins the three parts, used by the CLI (``normfree fidelity``), the API
(``GET /api/fidelity``, the fidelity page, the line beside every leaderboard) and the benchmarks:
:class:`~normfree.storage.references.ReferenceStore` reads the trials,
:func:`~normfree.fidelity.report.build_report` compares them, and the preset registry says which
model family the reference rows must speak about.

Reports are cached per process, keyed by what they read (the reference set's rows and the
count and last id of the finished trials in scope), so a leaderboard can show its fidelity on
every request while a study runs without recomputing the bootstrap each time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from sqlalchemy import func, select

from normfree.fidelity.caveats import calibration_of, near_chance_rule, uncalibrated_note
from normfree.fidelity.reference import cell_key
from normfree.fidelity.reliability import trials_reliability
from normfree.fidelity.report import BOOTSTRAP, build_report
from normfree.specs import TRAINED_STATUSES
from normfree.storage.db import Database
from normfree.storage.models import StudyRow, TrialRow
from normfree.storage.references import BUILTIN_NAME, ReferenceStore, default_context_key

_CACHE: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
_CACHE_MAX = 64
_LOCK = threading.Lock()


class FidelityError(LookupError):
    """Unknown proxy, study or reference set (the message says which)."""


def family_of(proxy: str) -> str:
    """ "vit" or "dit" for a registered preset."""
    from normfree.workers.proxies import PROXIES

    preset = PROXIES.get(proxy)
    if preset is None:
        raise FidelityError(f"unknown proxy {proxy!r}; choose from {sorted(PROXIES)}")
    return preset.family


def _scope_version(db: Database, proxy: str | None, study_id: int | None) -> tuple[int, int]:
    """(count, max id) of the finished trials a report would read: changes when one finishes."""
    q = select(func.count(), func.max(TrialRow.id)).where(TrialRow.status.in_(TRAINED_STATUSES))
    if proxy is not None:
        q = q.where(TrialRow.proxy == proxy, TrialRow.context_key == default_context_key(proxy))
    else:
        q = q.where(TrialRow.study_id == study_id)
    with db.session(readonly=True) as s:
        n, last = s.execute(q).one()
    return int(n or 0), int(last or 0)


def fidelity_report(
    db: Database,
    *,
    proxy: str | None = None,
    study_id: int | None = None,
    reference: str = BUILTIN_NAME,
    n_boot: int = BOOTSTRAP,
) -> dict[str, Any]:
    """The fidelity report of ``proxy`` (its preset setting) or of study ``study_id``."""
    store = ReferenceStore(db)
    if reference == BUILTIN_NAME:
        store.ensure_builtin()
    ref = store.get(reference)
    if ref is None:
        raise FidelityError(f"unknown reference set {reference!r}")
    if study_id is not None:
        with db.session(readonly=True) as s:
            study = s.get(StudyRow, study_id)
            if study is None:
                raise FidelityError(f"unknown study {study_id}")
            study_proxy = study.proxy
        family = family_of(study_proxy)
        subject = {"study_id": study_id, "proxy": study_proxy}
    elif proxy is not None:
        family = family_of(proxy)
        subject = {"proxy": proxy}
    else:
        raise FidelityError("give a proxy or a study")
    version = _scope_version(db, proxy, study_id)
    key = (db.url, reference, ref.digest(), proxy, study_id, n_boot, version)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    keys = {cell_key(r.cell) for r in ref.rows if r.family == family}
    subject_proxy = str(subject["proxy"])
    trials, scope = store.proxy_trials(
        proxy=proxy,
        study_id=study_id,
        cell_keys=keys,
        near_chance=near_chance_rule(subject_proxy),  # failed to train, on every preset
    )
    report = build_report(ref, trials, family=family, subject={**subject, **scope}, n_boot=n_boot)
    # no calibration, no headline (fidelity.caveats): the figures stay, marked as such
    report["calibration"] = calibration_of(subject_proxy)
    report["calibrated"] = report["calibration"] is not None
    report["caveats"] = [] if report["calibrated"] else [uncalibrated_note(subject_proxy)]
    # beside the agreement with scale, the ceiling on it: does the order reproduce itself?
    rel = trials_reliability(trials, bootstrap=n_boot)
    report["reliability"] = {**rel.as_dict(), "text": rel.text()}
    with _LOCK:
        _CACHE[key] = report
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return report


__all__ = ["FidelityError", "family_of", "fidelity_report"]
