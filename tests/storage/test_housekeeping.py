"""Housekeeping in storage (issue 27, point 5): archives leave the leaderboards and come back,
deletes say first what they remove and leave nothing behind, tags and notes, candidate
deletion refused while a study ran it. On both backends (the ``repo`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Repository, aggregates
from normfree.storage.candidates import CandidateInUse
from normfree.storage.models import ArmResultRow, TrialDiagnosticRow, TrialMetricRow, TrialRow
from normfree.storage.studies import StudyBusy

PROXY = "vit-tiny"


def _run_study(repo: Repository, names: list[str], seeds: range = range(2)) -> int:
    """A complete study: each name on each seed, finished with a value and one epoch."""
    from normfree.specs import EpochRecord

    sid = repo.create_study(StudySpec(kind="property", proxy=PROXY))
    repo.add_trials(
        sid, [TrialConfig(proxy=PROXY, norm=NormSpec(name=n), seed=s) for n in names for s in seeds]
    )
    repo.set_study_status(sid, "running")
    value = 0.5
    while (lease := repo.lease_next(sid, "w", 60)) is not None:
        repo.record_epoch(
            lease.id, "w", lease.attempt,
            EpochRecord(epoch=0, step=1, train_loss=1.0, val_loss=1.0, lr=0.1, wall_time_s=1.0),
        )  # fmt: skip
        value += 0.01
        result = TrialResult(
            status="complete",
            objective="val_acc",
            direction="maximize",
            metrics={"val_acc": value},
        )
        assert repo.finish_trial(lease.id, "w", lease.attempt, result)
    repo.set_study_status(sid, "complete")
    return sid


def _candidates(repo: Repository, **kw: Any) -> set[str]:
    return {r["candidate"] for r in repo.leaderboard(PROXY, **kw)}


def _arm(repo: Repository, sid: int, name: str) -> str:
    return next(t["arm_key"] for t in repo.list_trials(sid) if t["candidate"] == name)


def test_an_archived_study_leaves_the_boards_and_lists_and_comes_back(repo: Repository) -> None:
    kept = _run_study(repo, ["erf"])
    gone = _run_study(repo, ["tanh", "erf"], range(5, 7))
    before = repo.leaderboard(PROXY)
    assert _candidates(repo) == {"erf", "tanh"}
    row = repo.archive_study(gone)
    assert row["archived_at"] is not None
    assert _candidates(repo) == {"erf"}
    # the fast board (summaries) equals the board from the trials, both without the archive
    assert repo.leaderboard(PROXY) == repo.leaderboard(PROXY, from_scratch=True)
    erf = repo.leaderboard(PROXY)[0]
    assert erf["study_ids"] == [kept] and erf["n_trials"] == 2
    # ?archived=true: every trial counts again
    assert _candidates(repo, archived=True) == {"erf", "tanh"}
    assert [s["id"] for s in repo.list_studies(archived=False)] == [kept]
    assert [s["id"] for s in repo.list_studies(archived=True)] == [gone, kept]
    repo.archive_study(gone, archived=False)
    assert repo.leaderboard(PROXY) == before


def test_an_archived_arm_leaves_the_boards_of_its_study_only(repo: Repository) -> None:
    one = _run_study(repo, ["erf", "tanh"])
    two = _run_study(repo, ["tanh"], range(3, 5))
    arm = _arm(repo, one, "tanh")
    assert repo.archive_arm(one, arm) == 2
    assert repo.archived_arms(one) == [arm]
    tanh = next(r for r in repo.leaderboard(PROXY) if r["candidate"] == "tanh")
    assert tanh["study_ids"] == [two]  # the other study's tanh still counts
    assert repo.leaderboard(PROXY) == repo.leaderboard(PROXY, from_scratch=True)
    with repo.db.engine.begin() as conn:  # the summaries equal a rebuild, archives skipped
        a = ArmResultRow.__table__
        rows = conn.execute(sa.select(a.c.arm_key, a.c.n_trials).order_by(a.c.arm_key)).all()
        aggregates.rebuild(conn)
        assert (
            conn.execute(sa.select(a.c.arm_key, a.c.n_trials).order_by(a.c.arm_key)).all() == rows
        )
    repo.archive_arm(one, arm, archived=False)
    assert repo.archived_arms(one) == []
    with pytest.raises(KeyError):
        repo.archive_arm(one, "no-such-arm")
    with pytest.raises(KeyError):
        repo.archive_arm(999, arm)


def test_a_delete_preview_counts_what_the_delete_removes(repo: Repository) -> None:
    keep = _run_study(repo, ["erf"])
    sid = _run_study(repo, ["erf", "tanh"], range(4, 6))
    preview = repo.study_removal(sid)
    assert preview["trials"] == 4 and preview["curve_points"] == 4
    assert preview["leaderboard_arms"] == 2 and preview["blocked"] is None
    assert preview["optuna_study"] == f"normfree-study-{sid}"
    assert repo.study_removal(sid)["trials"] == 4  # a preview removes nothing
    repo.delete_finished_study(sid)
    with repo.db.session(readonly=True) as s:
        left = {t: s.scalar(sa.select(sa.func.count()).select_from(t)) for t in
                (TrialRow, TrialMetricRow, TrialDiagnosticRow)}  # fmt: skip
        arms = s.execute(sa.select(ArmResultRow.candidate, ArmResultRow.study_ids)).all()
    assert left[TrialRow] == 2 and left[TrialMetricRow] == 2
    assert arms == [("erf", [keep])]  # tanh's summary went with its only study


def test_deleting_one_arm_removes_its_trials_and_refolds_the_board(repo: Repository) -> None:
    sid = _run_study(repo, ["erf", "tanh"])
    arm = _arm(repo, sid, "tanh")
    preview = repo.study_removal(sid, arm)
    assert preview["trials"] == 2 and preview["arms"] == [arm] and preview["optuna_study"] is None
    removed = repo.delete_arm(sid, arm)
    assert removed["trials"] == 2
    assert {t["candidate"] for t in repo.list_trials(sid)} == {"erf"}
    assert _candidates(repo) == {"erf"}
    assert repo.leaderboard(PROXY) == repo.leaderboard(PROXY, from_scratch=True)
    with pytest.raises(KeyError):
        repo.study_removal(sid, arm)


def test_a_running_study_cannot_be_archived_or_lose_an_arm(repo: Repository) -> None:
    sid = repo.create_study(StudySpec(kind="property", proxy=PROXY))
    repo.add_trials(sid, [TrialConfig(proxy=PROXY, norm=NormSpec(name="erf"), seed=0)])
    repo.set_study_status(sid, "running")
    arm = repo.list_trials(sid)[0]["arm_key"]
    with pytest.raises(StudyBusy):
        repo.archive_study(sid)
    with pytest.raises(StudyBusy):
        repo.delete_arm(sid, arm)
    assert "running" in (repo.study_removal(sid)["blocked"] or "")


def test_tags_and_notes(repo: Repository) -> None:
    sid = _run_study(repo, ["erf"])
    other = _run_study(repo, ["tanh"])
    assert repo.tag_study(sid, add=["screen", "v2"]) == ["screen", "v2"]
    assert repo.tag_study(sid, add=["final"], remove=["v2"]) == ["final", "screen"]
    assert [s["id"] for s in repo.list_studies(tag="screen")] == [sid]
    assert repo.get_study(other)["tags"] == []
    for bad in ("", "two words", "a,b", "x" * 41):
        with pytest.raises(ValueError):
            repo.tag_study(sid, add=[bad])
    with pytest.raises(ValueError):
        repo.tag_study(sid, add=[f"t{i}" for i in range(30)])
    assert repo.note_study(sid, "  lr too high in seed 1 ") == "lr too high in seed 1"
    assert repo.get_study(sid)["note"] == "lr too high in seed 1"
    assert repo.note_study(sid, "") is None
    with pytest.raises(ValueError):
        repo.note_study(sid, "x" * 6000)
    with pytest.raises(KeyError):
        repo.tag_study(999, add=["a"])


def test_a_candidate_a_study_ran_cannot_be_deleted_but_can_be_archived(repo: Repository) -> None:
    for name in ("mine", "spare"):
        repo.claim_candidate(
            {"name": name, "formula": f"tanh(u)*{len(name)}", "canonical": name}, "alice",
            owner_token_id=7,
        )  # fmt: skip
    sid = _run_study(repo, ["mine", "shift_h(spare, 1)"])
    assert repo.candidate_usage("mine") == [sid]
    assert repo.candidate_usage("spare") == [sid]  # under a transform counts too
    with pytest.raises(CandidateInUse) as lost:
        repo.delete_candidate("mine")
    assert lost.value.study_ids == [sid]
    row = repo.archive_candidate("mine")
    assert row["archived_at"] is not None and row["owner_token_id"] == 7
    assert [r["name"] for r in repo.list_candidates(archived=False)] == ["spare"]
    assert _candidates(repo) == {"mine", "shift_h(spare, 1)"}  # the study's results stay
    repo.delete_finished_study(sid)
    assert repo.delete_candidate("mine")["name"] == "mine"
    assert repo.get_candidate("mine") is None
    with pytest.raises(KeyError):
        repo.delete_candidate("mine")


def test_an_expired_token_says_when(repo: Repository) -> None:
    from datetime import UTC, datetime, timedelta

    old = repo.create_token("old", ["write"], expires_at=datetime.now(UTC) - timedelta(hours=1))
    new = repo.create_token("new", ["write"], expires_at=datetime.now(UTC) + timedelta(hours=1))
    assert repo.token_principal(old) is None and repo.token_expiry(old) is not None
    assert repo.token_principal(new) is not None and repo.token_expiry(new) is None
    assert repo.token_expiry("nf_unknown") is None


def test_a_trial_of_an_archived_study_finishing_later_counts_nowhere(repo: Repository) -> None:
    """Archived, then run again by a way round the API's refusal (the engine resumes it):
    the trials it finishes stay off the boards, in the summaries as in a rebuild."""
    sid = _run_study(repo, ["erf"])
    repo.archive_study(sid)
    repo.add_trials(sid, [TrialConfig(proxy=PROXY, norm=NormSpec(name="tanh"), seed=9)])
    repo.set_study_status(sid, "running")
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    done = TrialResult(status="complete", objective="val_acc", metrics={"val_acc": 0.9})
    assert repo.finish_trial(lease.id, "w", lease.attempt, done)
    assert repo.leaderboard(PROXY) == [] == repo.leaderboard(PROXY, from_scratch=True)
    assert _candidates(repo, archived=True) == {"erf", "tanh"}
