"""The repository's trial ledger (plan, lease, record, finish, fail, release), on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest

from normfree.specs import EpochRecord, LayerDiagnostic, TrialConfig, TrialResult
from normfree.storage import Repository
from normfree.storage.models import utcnow
from tests.storage.support import PROXY, cfg, complete, epoch, study

# -- planning ----------------------------------------------------------------------------------


def test_add_trials_is_idempotent(repo: Repository) -> None:
    sid = study(repo)
    items = [(cfg(n, s), {"f": n, "seed": s}, None) for n in ("erf", "tanh") for s in range(3)]
    ids = repo.add_trials(sid, items)
    assert len(set(ids)) == 6
    # the same configs again (and bare configs, and a late Optuna number): same ids, no new rows
    assert repo.add_trials(sid, list(reversed(items))) == list(reversed(ids))
    assert repo.add_trials(sid, [cfg("erf", 0), (cfg("tanh", 2), None, 7)]) == [ids[0], ids[5]]
    assert len(repo.list_trials(sid)) == 6
    assert repo.get_trial(ids[5])["optuna_number"] == 7  # type: ignore[index]
    # another study may hold the same configs
    other = study(repo)
    assert set(repo.add_trials(other, items)).isdisjoint(ids)
    progress = repo.study_progress(sid)
    assert progress["total"] == 6
    assert progress["counts"]["WAITING"] == 6
    assert progress["best"] is None
    t = repo.get_trial(ids[1])
    assert t is not None
    assert (t["candidate"], t["seed"], t["status"], t["attempt"]) == ("erf", 1, "WAITING", 0)
    assert TrialConfig.model_validate(t["config"]) == cfg("erf", 1)
    assert t["axis_values"] == {"f": "erf", "seed": 1}
    assert repo.add_trials(sid, []) == []
    with pytest.raises(TypeError):
        repo.add_trials(sid, [("not a config",)])  # type: ignore[list-item]


# -- leases ------------------------------------------------------------------------------------


def test_lease_exclusive_between_owners(repo: Repository) -> None:
    sid = study(repo)
    ids = repo.add_trials(sid, [cfg("erf", s) for s in range(5)])
    got: dict[str, list[int]] = {"a": [], "b": []}
    owner = "a"
    while (lease := repo.lease_next(sid, owner, 60)) is not None:
        assert lease.attempt == 1
        assert lease.owner == owner
        assert lease.config == cfg("erf", ids.index(lease.id))
        got[owner].append(lease.id)
        owner = "b" if owner == "a" else "a"
    assert sorted(got["a"] + got["b"]) == ids
    assert set(got["a"]).isdisjoint(got["b"])
    assert repo.study_progress(sid)["counts"]["RUNNING"] == 5
    t = repo.get_trial(got["b"][0])
    assert t is not None
    assert (t["status"], t["lease_owner"]) == ("RUNNING", "b")


def test_paused_and_cancelled_studies_hand_out_nothing(repo: Repository) -> None:
    sid = study(repo)
    repo.add_trials(sid, [cfg("erf", s) for s in range(3)])
    repo.set_study_status(sid, "paused")
    assert repo.lease_next(sid, "w", 60) is None
    assert repo.lease_next(None, "w", 60) is None
    repo.set_study_status(sid, "running")
    lease = repo.lease_next(None, "w", 60)
    assert lease is not None
    assert lease.study_id == sid
    repo.set_study_status(sid, "cancelled")
    assert repo.cancel_waiting(sid) == 2
    assert repo.lease_next(sid, "w", 60) is None
    counts = repo.study_progress(sid)["counts"]
    assert (counts["CANCELLED"], counts["RUNNING"], counts["WAITING"]) == (2, 1, 0)


def test_renew_lease(repo: Repository) -> None:
    sid = study(repo)
    repo.add_trials(sid, [cfg("erf"), cfg("tanh")])
    live = repo.lease_next(sid, "w", 60)
    assert live is not None
    assert repo.renew_lease(live.id, "w", live.attempt, 60)
    assert not repo.renew_lease(live.id, "other", live.attempt, 60)
    assert not repo.renew_lease(live.id, "w", live.attempt + 1, 60)
    # a lease that already expired (negative length) cannot be renewed: the worker must stop
    dead = repo.lease_next(sid, "w", -1)
    assert dead is not None
    assert not repo.renew_lease(dead.id, "w", dead.attempt, 60)


def test_requeue_expired_then_failed(repo: Repository) -> None:
    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("erf")])
    keep = repo.add_trials(sid, [cfg("tanh")])[0]
    live = repo.lease_next(sid, "w", 60)  # leases the oldest trial (tid) ...
    assert live is not None
    assert live.id == tid
    assert repo.requeue_expired() == []  # ... whose lease is live
    later = utcnow() + timedelta(seconds=120)
    for attempt in (1, 2, 3):
        if attempt > 1:
            live = repo.lease_next(sid, f"w{attempt}", 60)
            assert live is not None
        assert (live.id, live.attempt) == (tid, attempt)
        assert repo.requeue_expired(now=later) == [tid]
        t = repo.get_trial(tid)
        assert t is not None
        if attempt < 3:
            assert t["status"] == "WAITING"
            assert t["lease_owner"] is None
            assert "requeued" in t["error"]
        # the lost worker's late writes are refused
        assert not repo.finish_trial(tid, live.owner, attempt, complete(0.9))
        assert not repo.record_epoch(tid, live.owner, attempt, epoch(0))
    t = repo.get_trial(tid)
    assert t is not None
    assert t["status"] == "FAILED"
    assert t["attempt"] == 3
    assert "lease expired on attempt 3" in t["error"]
    assert "3 of 3 attempts" in t["error"]
    assert repo.get_trial(keep)["status"] == "WAITING"  # type: ignore[index]


def test_requeue_honours_max_attempts_argument(repo: Repository) -> None:
    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("erf")])
    repo.lease_next(sid, "w", -1)
    assert repo.requeue_expired(max_attempts=1) == [tid]
    assert repo.get_trial(tid)["status"] == "FAILED"  # type: ignore[index]


# -- results -----------------------------------------------------------------------------------


def test_finish_trial_written_once(repo: Repository) -> None:
    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("erf")])
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    assert repo.record_epoch(tid, "w", 1, epoch(0, 2.0))
    assert repo.record_epoch(tid, "w", 1, epoch(0, 1.5))  # same epoch again: overwritten
    assert repo.record_epoch(tid, "w", 1, epoch(1, 1.0), lease_seconds=120)
    assert not repo.record_epoch(tid, "intruder", 1, epoch(2))
    assert [c["train_loss"] for c in repo.get_trial(tid)["curves"]] == [1.5, 1.0]  # type: ignore[index]

    result = complete(
        0.93,
        curves=[epoch(0, 1.4), epoch(1, 0.9), epoch(2, 0.7)],
        diagnostics=[
            LayerDiagnostic(epoch=2, layer="blocks.0.norm1", alpha=0.41, gamma_mean=1.01),
            LayerDiagnostic(epoch=2, layer="norm_final", alpha=0.52, extra={"q": 1.0}),
        ],
        eval_train_loss=0.65,
        train_time_s=12.5,
        total_time_s=13.0,
        worker="node-1",
    )
    assert not repo.finish_trial(tid, "intruder", 1, result)  # wrong owner
    assert not repo.finish_trial(tid, "w", 2, result)  # wrong attempt
    assert repo.finish_trial(tid, "w", 1, result)
    assert not repo.finish_trial(tid, "w", 1, complete(0.1))  # second write: no-op
    assert not repo.fail_trial(tid, "w", 1, "late failure")
    assert not repo.renew_lease(tid, "w", 1, 60)

    t = repo.get_trial(tid)
    assert t is not None
    assert t["status"] == "COMPLETE"
    assert t["value"] == pytest.approx(0.93)
    assert t["metrics"] == {"val_acc": 0.93}
    assert (t["objective"], t["direction"], t["worker"]) == ("val_acc", "maximize", "node-1")
    assert (t["eval_train_loss"], t["train_time_s"], t["total_time_s"]) == (0.65, 12.5, 13.0)
    assert t["finished_at"] is not None
    assert [(c["epoch"], c["train_loss"]) for c in t["curves"]] == [(0, 1.4), (1, 0.9), (2, 0.7)]
    assert [(d["layer"], d["alpha"]) for d in t["diagnostics"]] == [
        ("blocks.0.norm1", 0.41),
        ("norm_final", 0.52),
    ]
    assert t["diagnostics"][1]["extra"] == {"q": 1.0}
    progress = repo.study_progress(sid)
    assert progress["best"]["trial_id"] == tid
    assert progress["fraction_finished"] == 1.0


def test_finished_trial_is_read_from_its_stored_document(repo: Repository) -> None:
    """finish_trial stores the trial's detail (TrialRow.document) in its transaction; a read
    uses it while its stamp is the row's, and a later write to the row is never hidden by it."""
    from sqlalchemy import text, update

    from normfree.storage import reads
    from normfree.storage.models import TrialRow

    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("erf")])
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    diags = [LayerDiagnostic(epoch=1, layer="norm_final", alpha=0.5, extra={"q": 2.0})]
    result = complete(0.9, curves=[epoch(0, 1.2), epoch(1, 0.8)], diagnostics=diags)
    assert repo.finish_trial(tid, "w", lease.attempt, result)
    db = repo.db
    with db.read() as conn:
        stored = conn.execute(text("SELECT document FROM trials WHERE id = :i"), {"i": tid})
        assert stored.scalar() is not None
        assert reads.trial_detail(conn, tid) == reads.build_trial_detail(conn, tid)
        # the document is what is read: change it and the read shows the change
        conn.execute(
            text("UPDATE trials SET document = :d WHERE id = :i"),
            {"d": stored_doc_with(reads.build_trial_detail(conn, tid), worker="from-document"),
             "i": tid},
        )  # fmt: skip
        assert reads.trial_detail(conn, tid)["worker"] == "from-document"  # type: ignore[index]
    with db.session() as s:  # a later write: its onupdate moves updated_at past the document's
        s.execute(update(TrialRow).where(TrialRow.id == tid).values(error="late note"))
    with db.read() as conn:
        t = reads.trial_detail(conn, tid)
        assert t is not None and t["error"] == "late note" and t["worker"] != "from-document"
        assert t == reads.build_trial_detail(conn, tid)
    assert repo.get_trial(tid)["error"] == "late note"  # type: ignore[index]


def stored_doc_with(doc: dict, **changes: object) -> str:
    import json

    return json.dumps({**doc, **changes})


def test_diverged_result_has_no_value(repo: Repository) -> None:
    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("identity")])
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    diverged = TrialResult(
        status="diverged", metrics={"val_acc": 0.1}, objective="val_acc", diverged_at_step=17
    )
    assert repo.finish_trial(tid, "w", lease.attempt, diverged)
    t = repo.get_trial(tid)
    assert t is not None
    assert (t["status"], t["value"], t["diverged_at_step"]) == ("DIVERGED", None, 17)


def test_spike_step_round_trips(repo: Repository) -> None:
    """spike_step (migration 0005) is written by finish_trial and read back; None stays None."""
    sid = study(repo)
    spiked, calm = repo.add_trials(sid, [cfg("identity"), cfg("erf")])
    results = {
        spiked: TrialResult(
            status="diverged", objective="val_acc", diverged_at_step=40, spike_step=37
        ),
        calm: complete(0.9),
    }
    while (lease := repo.lease_next(sid, "w", 60)) is not None:
        assert repo.finish_trial(lease.id, "w", lease.attempt, results[lease.id])
    a, b = repo.get_trial(spiked), repo.get_trial(calm)
    assert a is not None and b is not None
    assert (a["status"], a["diverged_at_step"], a["spike_step"]) == ("DIVERGED", 40, 37)
    assert (b["status"], b["spike_step"]) == ("COMPLETE", None)


def test_fail_trial_retry_then_give_up(repo: Repository) -> None:
    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("erf")])
    for attempt in (1, 2, 3):
        lease = repo.lease_next(sid, "w", 60)
        assert lease is not None
        assert lease.attempt == attempt
        assert not repo.fail_trial(tid, "other", attempt, "not mine", retry=True)
        assert repo.fail_trial(tid, "w", attempt, f"out of memory #{attempt}", retry=True)
    t = repo.get_trial(tid)
    assert t is not None
    assert (t["status"], t["error"]) == ("FAILED", "out of memory #3")
    assert repo.lease_next(sid, "w", 60) is None

    (tid2,) = repo.add_trials(sid, [cfg("tanh")])
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    assert repo.fail_trial(tid2, "w", 1, "bad formula", retry=False)
    assert repo.get_trial(tid2)["status"] == "FAILED"  # type: ignore[index]


def test_list_trials_filters(repo: Repository) -> None:
    sid = study(repo)
    ids = repo.add_trials(sid, [cfg("erf", 0), cfg("erf", 1), cfg("tanh", 0)])
    repo.lease_next(sid, "w", 60)
    assert [t["id"] for t in repo.list_trials(sid, candidate="erf")] == ids[:2]
    assert [t["id"] for t in repo.list_trials(sid, status="RUNNING")] == ids[:1]
    assert [t["id"] for t in repo.list_trials(status=["WAITING"], proxy=PROXY)] == ids[1:]
    assert [t["id"] for t in repo.list_trials(sid, limit=1, offset=1)] == ids[1:2]
    assert repo.list_trials(proxy="other") == []
    assert repo.get_trial(10_000) is None


def test_release_lease_is_uncharged_but_fenced(repo: Repository) -> None:
    """A paused trial goes back uncharged; the old lease still cannot write."""
    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("erf")])
    first = repo.lease_next(sid, "driver", 60)
    assert first is not None
    assert not repo.release_lease(tid, "other", first.attempt)
    assert repo.release_lease(tid, "driver", first.attempt, reason="study paused")
    t = repo.get_trial(tid)
    assert t is not None
    assert (t["status"], t["attempt"], t["releases"], t["error"]) == (
        "WAITING",
        1,
        1,
        "study paused",
    )
    # released three times, then three real losses: only the losses count against max_attempts
    for _ in range(2):
        lease = repo.lease_next(sid, "driver", 60)
        assert lease is not None
        assert repo.release_lease(tid, "driver", lease.attempt)
    later = utcnow() + timedelta(seconds=120)
    for loss in (1, 2, 3):
        lease = repo.lease_next(sid, "driver", 60)
        assert lease is not None
        assert lease.attempt == 3 + loss
        # the first lease's writes are refused although owner and study are the same
        assert not repo.finish_trial(tid, "driver", first.attempt, complete(0.5))
        repo.requeue_expired(now=later)
        expected = "WAITING" if loss < 3 else "FAILED"
        assert repo.get_trial(tid)["status"] == expected  # type: ignore[index]


def test_cancel_running_and_get_by_key(repo: Repository) -> None:
    sid = study(repo)
    ids = repo.add_trials(sid, [cfg("erf"), cfg("tanh")])
    assert repo.get_trial_by_key(sid, cfg("tanh").key())["id"] == ids[1]  # type: ignore[index]
    assert repo.get_trial_by_key(sid, "nope") is None
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    assert not repo.cancel_running(lease.id, "other", lease.attempt)
    assert repo.cancel_running(lease.id, "w", lease.attempt)
    assert not repo.finish_trial(lease.id, "w", lease.attempt, complete(0.9))
    t = repo.get_trial(lease.id)
    assert t is not None
    assert (t["status"], t["error"]) == ("CANCELLED", "study cancelled")
    assert repo.study_progress(sid)["finished"] == 1


def test_non_finite_values_are_stored_as_null(repo: Repository) -> None:
    """A diverging trial reports NaN/inf: stored as None on every backend (JSON-safe)."""
    nan, inf = float("nan"), float("inf")
    sid = study(repo)
    (tid,) = repo.add_trials(sid, [cfg("identity")])
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    bad = EpochRecord(
        epoch=0,
        step=3,
        train_loss=nan,
        val_loss=inf,
        metrics={"val_acc": nan},
        lr=1e-3,
        wall_time_s=1.0,
    )
    assert repo.record_epoch(tid, "w", lease.attempt, bad)
    result = TrialResult(
        status="diverged",
        metrics={"val_acc": nan, "val_loss": inf},
        objective="val_acc",
        curves=[bad],
        diagnostics=[LayerDiagnostic(epoch=0, layer="norm1", alpha=nan, input_std=inf)],
        eval_train_loss=nan,
        diverged_at_step=3,
    )
    assert repo.finish_trial(tid, "w", lease.attempt, result)
    t = repo.get_trial(tid)
    assert t is not None
    assert (t["status"], t["eval_train_loss"], t["metrics"]) == (
        "DIVERGED",
        None,
        {"val_acc": None, "val_loss": None},
    )
    (curve,) = t["curves"]
    assert (curve["train_loss"], curve["val_loss"], curve["metrics"]) == (
        None,
        None,
        {"val_acc": None},
    )
    assert (t["diagnostics"][0]["alpha"], t["diagnostics"][0]["input_std"]) == (None, None)
