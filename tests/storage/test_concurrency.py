"""Several writers at once: no "database is locked", no trial run twice, no duplicated rows."""

from __future__ import annotations

import multiprocessing as mp
import threading
from typing import Any

from sqlalchemy import func, select

from normfree.specs import EpochRecord, NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Database, Repository
from normfree.storage.models import TrialMetricRow, TrialRow

EPOCHS = 3


def _items(n: int) -> list[tuple[TrialConfig, dict[str, Any], None]]:
    names = ("erf", "tanh", "layernorm", "identity")
    return [
        (TrialConfig(proxy="vit-tiny", norm=NormSpec(name=names[i % 4]), seed=i // 4), {}, None)
        for i in range(n)
    ]


def _work(url: str, study_id: int, owner: str, n_trials: int) -> dict[str, Any]:
    """One writer: plan (the same trials as everyone), then lease, report, finish until empty."""
    db = Database(url)
    repo = Repository(db, max_attempts=3)
    finished: list[int] = []
    errors: list[str] = []
    planned: list[int] = []
    try:
        planned = repo.add_trials(study_id, _items(n_trials))  # everyone plans the same grid
        while (lease := repo.lease_next(study_id, owner, 30)) is not None:
            for e in range(EPOCHS):
                rec = EpochRecord(epoch=e, step=e, train_loss=1.0 / (e + 1), lr=0.1, wall_time_s=e)
                if not repo.record_epoch(lease.id, owner, lease.attempt, rec):
                    errors.append(f"lost lease on {lease.id}")
                repo.renew_lease(lease.id, owner, lease.attempt, 30)
            repo.study_progress(study_id)  # readers interleave with the writers
            result = TrialResult(
                status="complete",
                metrics={"val_acc": 0.5 + 0.01 * lease.config.seed},
                objective="val_acc",
                curves=[
                    EpochRecord(epoch=e, step=e, train_loss=0.5, lr=0.1, wall_time_s=e)
                    for e in range(EPOCHS)
                ],
            )
            if repo.finish_trial(lease.id, owner, lease.attempt, result):
                finished.append(lease.id)
            else:
                errors.append(f"finish refused for {lease.id}")
            if repo.finish_trial(lease.id, owner, lease.attempt, result):
                errors.append(f"second finish accepted for {lease.id}")
            repo.requeue_expired()
    except Exception as exc:  # reported to the parent: "database is locked" would land here
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        db.dispose()
    return {"owner": owner, "finished": finished, "errors": errors, "planned": planned}


def _check(url: str, study_id: int, n_trials: int, results: list[dict[str, Any]]) -> None:
    errors = [e for r in results for e in r["errors"]]
    assert errors == []
    plans = {tuple(r["planned"]) for r in results}
    assert len(plans) == 1  # every concurrent add_trials returned the same ids
    finished = [t for r in results for t in r["finished"]]
    assert sorted(finished) == sorted(plans.pop())  # each trial finished once, by one owner
    assert sum(1 for r in results if r["finished"]) >= 2  # the work really was shared
    db = Database(url)
    try:
        with db.session(readonly=True) as s:
            statuses = s.execute(
                select(TrialRow.status, func.count())
                .where(TrialRow.study_id == study_id)
                .group_by(TrialRow.status)
            ).all()
            assert statuses == [("COMPLETE", n_trials)]
            assert s.scalar(select(func.count()).select_from(TrialMetricRow)) == n_trials * EPOCHS
            assert set(s.scalars(select(TrialRow.attempt))) == {1}
    finally:
        db.dispose()


def _new_study(url: str) -> int:
    db = Database(url)
    db.migrate()
    try:
        sid = Repository(db).create_study(StudySpec(kind="property", proxy="vit-tiny"))
        Repository(db).set_study_status(sid, "running")
        return sid
    finally:
        db.dispose()


def test_concurrent_threads_both_backends(database_url: str) -> None:
    """Threads with their own connections from one engine: leases are exclusive."""
    n = 16
    sid = _new_study(database_url)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def run(owner: str) -> None:
        out = _work(database_url, sid, owner, n)
        with lock:
            results.append(out)

    threads = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 4
    _check(database_url, sid, n, results)


def test_concurrent_processes_sqlite(sqlite_database_url: str) -> None:
    """Four processes plan, lease, report and finish on one SQLite file at once."""
    n = 24
    sid = _new_study(sqlite_database_url)
    ctx = mp.get_context("spawn")  # fresh interpreters: no engine inherited across fork
    with ctx.Pool(4) as pool:
        results = pool.starmap(_work, [(sqlite_database_url, sid, f"p{i}", n) for i in range(4)])
    _check(sqlite_database_url, sid, n, results)
