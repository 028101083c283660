"""Records and steps shared by the repository contract suites (repository, trials, leaderboard)."""

from __future__ import annotations

from collections.abc import Callable

from normfree.specs import EpochRecord, NormSpec, StudySpec, TrialConfig, TrialResult
from normfree.storage import Repository

PROXY = "vit-tiny"


def cfg(norm: str, seed: int = 0, **kw: object) -> TrialConfig:
    return TrialConfig(proxy=PROXY, norm=NormSpec(name=norm), seed=seed, **kw)  # type: ignore[arg-type]


def study(repo: Repository, **kw: object) -> int:
    return repo.create_study(StudySpec(kind="property", proxy=PROXY, **kw))  # type: ignore[arg-type]


def epoch(i: int, loss: float = 1.0) -> EpochRecord:
    return EpochRecord(epoch=i, step=10 * (i + 1), train_loss=loss, lr=1e-3, wall_time_s=0.5 * i)


def complete(value: float, **kw: object) -> TrialResult:
    return TrialResult(
        status="complete",
        metrics={"val_acc": value},
        objective="val_acc",
        **kw,  # type: ignore[arg-type]
    )


def run_all(repo: Repository, sid: int, outcome: Callable[[TrialConfig], TrialResult]) -> None:
    """Lease every WAITING trial of the study and finish it with ``outcome(config)``."""
    while (lease := repo.lease_next(sid, "runner", 60)) is not None:
        assert repo.finish_trial(lease.id, "runner", lease.attempt, outcome(lease.config))
