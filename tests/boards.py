"""Leaderboards seeded straight through the repository, for the tests that read boards (REST,
pages, CLI) without training: an options study on the tiny ViT whose trials complete with the
val_acc values the test names, so every rank and interval is known in advance."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from normfree.specs import NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Database, Repository

PROXY = "vit-tiny"


def seed_board(
    url: str,
    arms: Iterable[tuple[NormSpec | str, Sequence[float]]],
    candidates: Sequence[dict[str, Any]] = (),
) -> int:
    """Store ``candidates`` and one options study at ``url`` (migrated first) with a trial per
    arm and seed: the i-th value of an arm is seed i's val_acc. Returns the study's id."""
    db = Database(url)
    db.migrate()
    try:
        repo = Repository(db, max_attempts=3)
        for row in candidates:
            repo.upsert_candidate(row)
        sid = repo.create_study(StudySpec(kind="options", proxy=PROXY, functions=["erf"]))
        values: dict[str, float] = {}
        items = []
        for arm, vs in arms:
            norm = arm if isinstance(arm, NormSpec) else NormSpec(name=arm)
            for seed, value in enumerate(vs):
                config = TrialConfig(proxy=PROXY, norm=norm, seed=seed)
                values[config.key()] = value
                items.append((config, {"function": norm.name}, None))
        repo.add_trials(sid, items)
        while (lease := repo.lease_next(sid, "t", 60)) is not None:
            val_acc = values[lease.config.key()]
            result = TrialResult(
                status="complete", metrics={"val_acc": val_acc}, objective="val_acc"
            )
            assert repo.finish_trial(lease.id, "t", lease.attempt, result)
    finally:
        db.dispose()
    return sid
