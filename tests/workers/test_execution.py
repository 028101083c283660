"""The task body, in-process (no Ray): leases decide who may write, pause hands trials back."""

from __future__ import annotations

from pathlib import Path

from normfree.specs import StudySpec, TrialConfig, TrialResult
from normfree.workers.driver import create_study
from normfree.workers.execution import TrialJob, TrialStore, run_trial_job
from tests.workers.engine_support import engine_settings


def _setup(tmp_path: Path) -> tuple[TrialStore, int]:
    url = f"sqlite:///{tmp_path / 'nf.db'}"
    spec = StudySpec(kind="options", proxy="vit-tiny", seeds=1, functions=["erf"], epochs=1)
    study_id = create_study(spec, settings=engine_settings(url))
    return TrialStore(url), study_id


def _job(store: TrialStore, leased, owner: str | None = None) -> TrialJob:
    return TrialJob(
        trial_id=leased.id,
        study_id=leased.study_id,
        config_json=leased.config.model_dump_json(),
        attempt=leased.attempt,
        owner=owner or leased.owner,
        database_url=store.url,
        lease_seconds=30.0,
    )


def test_lease_holder_writes_once(tmp_path: Path) -> None:
    store, sid = _setup(tmp_path)
    leased = store.repo.lease_next(sid, "me", 30.0)
    out = run_trial_job(_job(store, leased))
    assert out.status == "COMPLETE" and out.written and out.value is not None
    assert out.trial_s > 0 and out.report_s >= 0
    row = store.repo.get_trial(leased.id)
    assert row["status"] == "COMPLETE" and [c["epoch"] for c in row["curves"]] == [1]
    # A second write of the same attempt is a no-op (the result is written once).
    again = run_trial_job(_job(store, leased))
    assert again.status == "LOST" and not again.written


def test_a_stranger_cannot_write(tmp_path: Path) -> None:
    store, sid = _setup(tmp_path)
    leased = store.repo.lease_next(sid, "owner", 30.0)
    out = run_trial_job(_job(store, leased, owner="zombie"))
    assert out.status == "LOST" and out.stop == "lease_lost" and not out.written
    row = store.repo.get_trial(leased.id)
    assert row["status"] == "RUNNING" and row["lease_owner"] == "owner" and not row["curves"]


def test_pause_hands_the_trial_back_uncharged(tmp_path: Path) -> None:
    store, sid = _setup(tmp_path)
    leased = store.repo.lease_next(sid, "me", 30.0)
    assert leased.attempt == 1
    store.repo.set_study_status(sid, "paused")
    out = run_trial_job(_job(store, leased))
    assert out.status == "WAITING" and out.stop == "paused" and out.written
    row = store.repo.get_trial(leased.id)
    assert row["status"] == "WAITING" and row["lease_owner"] is None
    # Uncharged: the release is counted, the attempt number stays as the fencing token ...
    assert row["attempt"] == 1 and row["releases"] == 1
    # ... so after the same owner leases it again, the paused run's late write is refused.
    store.repo.set_study_status(sid, "running")
    again = store.repo.lease_next(sid, "me", 30.0)
    assert again is not None and again.id == leased.id and again.attempt == 2
    late = TrialResult(status="complete", metrics={"val_acc": 0.0}, objective="val_acc")
    assert not store.repo.finish_trial(leased.id, "me", leased.attempt, late)
    assert store.repo.get_trial(leased.id)["status"] == "RUNNING"


def test_cancel_marks_the_running_trial_cancelled(tmp_path: Path) -> None:
    store, sid = _setup(tmp_path)
    leased = store.repo.lease_next(sid, "me", 30.0)
    store.repo.set_study_status(sid, "cancelled")
    out = run_trial_job(_job(store, leased))
    assert out.status == "CANCELLED" and out.written
    assert store.repo.get_trial(leased.id)["status"] == "CANCELLED"


def test_config_travels_as_json(tmp_path: Path) -> None:
    store, sid = _setup(tmp_path)
    leased = store.repo.lease_next(sid, "me", 30.0)
    job = _job(store, leased)
    assert TrialConfig.model_validate_json(job.config_json) == leased.config
