"""The arm summaries contract: the fast leaderboard equals the from-scratch one, on both backends.

A history with what makes arms hard (the same seed run again by a later study, diverged, pruned
and failed trials on every path that fails one, cancelled trials, a LayerNorm context with two
LayerNorm arms, options and overrides, a minimised objective) is written through the repository;
then every leaderboard read from ``arm_results`` must equal, exactly, the one recomputed from
the trials, and the incremental summary rows must equal a rebuild from the trials table.
"""

from __future__ import annotations

import itertools
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Repository, aggregates
from normfree.storage.leaderboard import arms_from_summaries
from normfree.storage.models import ArmResultRow, utcnow

PROXY = "vit-tiny"
OTHER = "dit-tiny"


def _study(repo: Repository, proxy: str = PROXY) -> int:
    return repo.create_study(StudySpec(kind="property", proxy=proxy))


def _config(name: str, seed: int, proxy: str = PROXY, **norm: Any) -> TrialConfig:
    overrides = norm.pop("overrides", {})
    return TrialConfig(
        proxy=proxy, norm=NormSpec(name=name, **norm), seed=seed, overrides=overrides
    )


ARMS: list[tuple[str, dict[str, Any]]] = [
    ("erf", {}),
    ("erf", {"shift": "scalar"}),
    ("tanh", {}),
    ("tanh", {"overrides": {"depth": 2}}),
    ("shift_h(erf, 0)", {}),
    ("identity", {}),
    ("layernorm", {}),
    ("layernorm", {"affine": False}),  # a second LayerNorm arm in the same context
    ("layernorm", {"overrides": {"depth": 2}}),
]


def _outcome(rng: random.Random, minimise: bool) -> TrialResult:
    roll = rng.random()
    if roll < 0.12:
        return TrialResult(status="diverged", objective="val_acc", diverged_at_step=3)
    if roll < 0.18:
        return TrialResult(status="pruned", objective="val_acc", metrics={"val_acc": 0.1})
    if roll < 0.22:
        return TrialResult(status="failed", error="synthetic failure")
    value = round(rng.uniform(0.5, 0.95), 6)
    if minimise:
        return TrialResult(
            status="complete",
            objective="val_loss",
            direction="minimize",
            metrics={"val_loss": value, "val_acc": 1 - value},
        )
    return TrialResult(
        status="complete",
        objective="val_acc",
        direction="maximize",
        metrics={"val_acc": value, "val_loss": 1 - value},
    )


def write_history(repo: Repository, seed: int = 0) -> list[int]:
    """Four studies over the arms above, seeds overlapping; every way a trial can end."""
    rng = random.Random(seed)
    studies = []
    for k in range(4):
        sid = _study(repo)
        studies.append(sid)
        seeds = range(k, k + 3)  # overlapping seeds: later studies re-run earlier seeds
        items = [_config(n, s, **dict(o)) for (n, o), s in itertools.product(ARMS, seeds)]
        rng.shuffle(items)
        repo.add_trials(sid, items)
        repo.set_study_status(sid, "running")
        step = 0
        while (lease := repo.lease_next(sid, "w", 60)) is not None:
            step += 1
            if step % 11 == 0:  # the worker is lost: requeued, and FAILED on its last attempt
                later = utcnow() + timedelta(seconds=120)
                repo.requeue_expired(now=later, max_attempts=1)
                continue
            if step % 13 == 0:
                repo.fail_trial(lease.id, "w", lease.attempt, "gave up", retry=False)
                continue
            if step % 17 == 0:
                repo.cancel_running(lease.id, "w", lease.attempt)
                continue
            assert repo.finish_trial(lease.id, "w", lease.attempt, _outcome(rng, k == 3))
    # a few trials of another proxy, and a cancelled study
    sid = _study(repo, OTHER)
    repo.add_trials(sid, [_config("erf", s, OTHER) for s in range(3)])
    while (lease := repo.lease_next(sid, "w", 60)) is not None:
        repo.finish_trial(lease.id, "w", lease.attempt, _outcome(rng, False))
    sid = _study(repo)
    repo.add_trials(sid, [_config("erf", s) for s in range(10, 13)])
    repo.set_study_status(sid, "cancelled")
    repo.cancel_waiting(sid)
    return studies


def _summary_rows(repo: Repository) -> dict[tuple[str, str], dict[str, Any]]:
    a = ArmResultRow.__table__
    with repo.db.session(readonly=True) as s:
        rows = s.execute(sa.select(a)).all()
    skip = {"id", "updated_at"}
    return {
        (r.proxy, r.arm_key): {k: v for k, v in r._mapping.items() if k not in skip} for r in rows
    }


def test_fast_leaderboard_equals_from_scratch(repo: Repository) -> None:
    studies = write_history(repo)
    repo.upsert_candidate({"name": "erf", "group": "sigmoid", "properties": {"bounded": True}})
    repo.upsert_candidate({"name": "tanh", "group": "sigmoid", "properties": {"bounded": True}})
    fast = repo.leaderboard(PROXY)
    # shift_h(erf, 0) is erf: one function, one row (storage.leaderboard.merge_identities)
    assert len(fast) == len(ARMS) - 1
    assert "shift_h(erf, 0)" not in {r["candidate"] for r in fast}
    assert fast == repo.leaderboard(PROXY, from_scratch=True)
    # the history exercised what it is meant to
    assert sum(r["n_diverged"] for r in fast) > 0
    assert sum(r["n_failed"] for r in fast) > 0
    assert sum(r["n_pruned"] for r in fast) > 0
    assert any(r["vs_layernorm"] for r in fast)
    assert any(len(r["study_ids"]) > 1 for r in fast)
    assert "minimize" in {r["direction"] for r in fast}  # the last study minimised
    for kw in (
        {"group": "sigmoid"},
        {"group": "baseline"},
        {"properties": {"bounded": True}},
        {"direction": "maximize"},
        {"alpha": 0.2},
        {"study_id": studies[1]},
        {"study_id": studies[3], "group": "sigmoid"},
    ):
        assert repo.leaderboard(PROXY, **kw) == repo.leaderboard(PROXY, from_scratch=True, **kw)
    assert repo.leaderboard(OTHER) == repo.leaderboard(OTHER, from_scratch=True)
    assert repo.list_proxies() == [PROXY, OTHER]


def test_incremental_summaries_equal_a_rebuild(repo: Repository) -> None:
    write_history(repo, seed=1)
    incremental = _summary_rows(repo)
    with repo.db.engine.begin() as conn:
        assert aggregates.rebuild(conn) == len(incremental)
    assert _summary_rows(repo) == incremental
    with repo.db.engine.begin() as conn:
        aggregates.rebuild(conn, proxy=OTHER)
    assert _summary_rows(repo) == incremental


def test_fold_is_order_independent() -> None:
    t0 = utcnow()
    trials = [
        {
            "id": i,
            "study_id": 1 + i % 2,
            "proxy": PROXY,
            "arm_key": "a",
            "context_key": "c",
            "candidate": "erf",
            "norm": {"name": "erf", "i": i},
            "axis_values": {"i": i},
            "config": {"overrides": {"i": i}},
            "seed": i % 3,
            "status": status,
            "objective": "val_acc" if i else None,
            "direction": "maximize" if i % 2 else "minimize",
            "objective_value": 0.5 + i / 100 if status == "COMPLETE" else None,
            # two trials share a finish time: the id breaks the tie
            "finished_at": t0 + timedelta(seconds=min(i, 4)),
        }
        for i, status in enumerate(
            ["COMPLETE", "COMPLETE", "DIVERGED", "COMPLETE", "COMPLETE", "FAILED", "COMPLETE"]
        )
    ]
    results = []
    for perm in itertools.islice(itertools.permutations(trials), 0, None, 97):
        state = None
        for t in perm:
            state = aggregates.fold(state, t)
        results.append(state)
    assert all(r == results[0] for r in results)
    final = results[0]
    assert final["norm"] == {"name": "erf", "i": 0}  # the first finished trial's
    assert final["objective"] == "val_acc"  # the first one named
    assert final["direction"] == "minimize"  # the last one: id 6, at the time it shares with 4, 5
    # latest COMPLETE per seed; seed 2 only diverged or failed, so it has no value
    assert {s: v[0] for s, v in final["seeds"].items()} == {"0": 0.5 + 6 / 100, "1": 0.5 + 4 / 100}
    assert (final["n_trials"], final["n_diverged"], final["n_failed"]) == (7, 1, 1)
    assert final["study_ids"] == [1, 2]


def test_concurrent_finishes_lose_no_update(repo: Repository) -> None:
    """Four workers finish trials of the same arms at once: every trial is counted once."""
    sid = _study(repo)
    repo.add_trials(sid, [_config(n, s) for n in ("erf", "layernorm") for s in range(40)])
    repo.set_study_status(sid, "running")
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            while (lease := repo.lease_next(sid, name, 60)) is not None:
                value = 0.5 + lease.config.seed / 100
                result = TrialResult(
                    status="complete", objective="val_acc", metrics={"val_acc": value}
                )
                assert repo.finish_trial(lease.id, name, lease.attempt, result)
        except BaseException as exc:  # reported below, with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with repo.db.session(readonly=True) as s:
        arms = {a.candidate: a for a in arms_from_summaries(s, PROXY)}
    assert {n: a.n_trials for n, a in arms.items()} == {"erf": 40, "layernorm": 40}
    assert len(arms["erf"].by_seed) == 40
    assert repo.leaderboard(PROXY) == repo.leaderboard(PROXY, from_scratch=True)


def test_read_versions_move_with_what_they_cover(repo: Repository) -> None:
    def versions() -> dict[str, int]:
        with repo.db.session(readonly=True) as s:
            return aggregates.read_versions(s, [f"proxy:{PROXY}", f"proxy:{OTHER}", "candidates"])

    start = versions()
    assert start == {f"proxy:{PROXY}": 0, f"proxy:{OTHER}": 0, "candidates": 0}
    sid = _study(repo)
    (tid,) = repo.add_trials(sid, [_config("erf", 0)])
    lease = repo.lease_next(sid, "w", 60)
    assert lease is not None
    assert versions() == start  # planning and leasing change no leaderboard
    result = TrialResult(status="complete", objective="val_acc", metrics={"val_acc": 0.9})
    assert repo.finish_trial(tid, "w", lease.attempt, result)
    after = versions()
    assert after[f"proxy:{PROXY}"] == 1
    assert after[f"proxy:{OTHER}"] == 0
    assert not repo.finish_trial(tid, "w", lease.attempt, result)  # a refused write bumps nothing
    assert versions() == after
    repo.upsert_candidate({"name": "erf", "group": "sigmoid"})
    assert versions()["candidates"] == 1


@pytest.mark.parametrize("seed", [2, 3])
def test_contract_holds_for_other_histories(repo: Repository, seed: int) -> None:
    write_history(repo, seed=seed)
    assert repo.leaderboard(PROXY) == repo.leaderboard(PROXY, from_scratch=True)
