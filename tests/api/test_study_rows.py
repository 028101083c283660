"""A study's rows held per process (``api.study_rows``): handed out without a copy, so a
write must replace a row's dict, never change it in place."""

from __future__ import annotations

from pathlib import Path

from normfree.api import study_rows
from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Database, Repository

FIELDS = ("candidate", "seed", "status", "value")


def test_a_write_leaves_the_rows_handed_out_before_it_as_they_were(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'rows.db'}"
    db = Database(url)
    db.migrate()
    repo = Repository(db, max_attempts=3)
    sid = repo.create_study(StudySpec(kind="options", proxy="vit-tiny", functions=["erf"]))
    configs = [TrialConfig(proxy="vit-tiny", norm=NormSpec(name="erf"), seed=s) for s in range(3)]
    repo.add_trials(sid, [(c, {}, None) for c in configs])
    try:
        with db.read() as conn:
            first = study_rows.rows(conn, url, sid, FIELDS)
        with db.read() as conn:
            again = study_rows.rows(conn, url, sid, FIELDS)
        assert [r["status"] for r in first] == ["WAITING"] * 3 and again == first
        lease = repo.lease_next(sid, "w", 60)
        assert lease is not None
        result = TrialResult(status="complete", metrics={"val_acc": 0.9}, objective="val_acc")
        assert repo.finish_trial(lease.id, "w", lease.attempt, result)
        with db.read() as conn:
            after = study_rows.rows(conn, url, sid, FIELDS)
        done = next(r for r in after if r["id"] == lease.id)
        assert done["status"] == "COMPLETE" and done["value"] == 0.9
        # what an earlier rebuild holds is as it was when handed out
        before = next(r for r in first if r["id"] == lease.id)
        assert before is not done and before["status"] == "WAITING"
        assert [r["status"] for r in first] == ["WAITING"] * 3
    finally:
        study_rows.forget(url)
        db.dispose()
