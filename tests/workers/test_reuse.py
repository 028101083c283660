"""Reuse (issue 25, point 6): a study answers a planned trial from any earlier study that ran
the same trial key (proxy, operator, seed, budget, data) under the same trainer code, marks it
as reused and never trains it; a proxy's board still counts each run once."""

from __future__ import annotations

from pathlib import Path

from normfree.specs import EpochRecord, LayerDiagnostic, StudySpec, TrialResult
from normfree.storage import Database, Repository, aggregates
from normfree.workers.driver import create_study
from normfree.workers.versions import trainer_sources, trainer_version
from tests.workers.engine_support import engine_settings

V = trainer_version()


def _finish_all(repo: Repository, study_id: int, status: str = "complete", version: str = V):
    """Every waiting trial of the study 'trained' at once (value by seed), under ``version``."""
    while (lease := repo.lease_next(study_id, "w", 60)) is not None:
        v = 0.5 + 0.1 * lease.config.seed
        curves = [EpochRecord(epoch=1, step=5, train_loss=1.0, metrics={"val_acc": v}, lr=1e-3,
                              wall_time_s=1.0)]  # fmt: skip
        diags = [LayerDiagnostic(epoch=1, layer="norm_final", alpha=0.5)]
        result = TrialResult(
            status=status,  # type: ignore[arg-type]
            metrics={"val_acc": v} if status == "complete" else {},
            objective="val_acc",
            curves=curves,
            diagnostics=diags,
            failure="loss not finite" if status == "diverged" else None,
            code_version=version,
        )
        assert repo.finish_trial(lease.id, "w", lease.attempt, result)


def _spec(functions: list[str], **kw: object) -> StudySpec:
    return StudySpec(kind="options", proxy="vit-tiny", functions=functions, seeds=2, **kw)


def test_a_second_study_reuses_the_same_keys_and_trains_only_the_new_ones(url: str) -> None:
    settings = engine_settings(url)
    first = create_study(_spec(["erf", "tanh"]), settings=settings)
    repo = Repository(Database(settings.database_url), max_attempts=3)
    _finish_all(repo, first)
    second = create_study(_spec(["erf", "tanh", "isru"]), settings=settings)
    trials = repo.list_trials(second)
    reused = [t for t in trials if t["reused_from"] is not None]
    assert len(trials) == 6 and len(reused) == 4
    assert {t["candidate"] for t in reused} == {"erf", "tanh"}
    assert all(t["status"] == "COMPLETE" and t["code_version"] == V for t in reused)
    assert repo.study_progress(second)["reused"] == 4
    src = {t["id"]: t for t in repo.list_trials(first)}
    for t in reused:  # the run's result, curves and diagnostics, named by its source
        assert (
            src[t["reused_from"]]["value"] == t["value"]
            and src[t["reused_from"]]["seed"] == t["seed"]
        )
        detail = repo.get_trial(t["id"])
        assert [c["epoch"] for c in detail["curves"]] == [1] and detail["diagnostics"]
    # only isru's two seeds are left to train
    waiting = [t for t in trials if t["status"] == "WAITING"]
    assert sorted(t["candidate"] for t in waiting) == ["isru", "isru"]
    _finish_all(repo, second)
    # the study's board ranks its reused arms; the proxy's board counts each run once
    study_board = {r["candidate"]: r for r in repo.leaderboard("vit-tiny", study_id=second)}
    assert study_board["erf"]["n"] == 2 and study_board["isru"]["n"] == 2
    fast = {r["candidate"]: r for r in repo.leaderboard("vit-tiny")}
    slow = {r["candidate"]: r for r in repo.leaderboard("vit-tiny", from_scratch=True)}
    assert fast["erf"]["n_trials"] == 2 == slow["erf"]["n_trials"]
    assert {k: v["n_trials"] for k, v in fast.items()} == {
        k: v["n_trials"] for k, v in slow.items()
    }
    # a rebuild of the summaries from the trials table leaves the copies out too
    before = repo.leaderboard("vit-tiny")
    with repo.db.engine.begin() as conn:
        aggregates.rebuild(conn)
    assert repo.leaderboard("vit-tiny") == before


def test_another_code_version_a_changed_config_or_a_pruned_run_is_never_reused(
    tmp_path: Path,
) -> None:
    settings = engine_settings(f"sqlite:///{tmp_path / 'r.db'}")
    repo = Repository(Database(settings.database_url), max_attempts=3)
    old = create_study(_spec(["erf"]), settings=settings)
    _finish_all(repo, old, version="0123456789abcdef")  # trained by other code
    pruned = create_study(_spec(["tanh"]), settings=settings)
    _finish_all(repo, pruned, status="pruned")
    diverged = create_study(_spec(["arctan"]), settings=settings)
    _finish_all(repo, diverged, status="diverged")
    later = create_study(_spec(["erf", "tanh", "arctan"]), settings=settings)
    by = {(t["candidate"], t["seed"]): t for t in repo.list_trials(later)}
    assert by[("erf", 0)]["status"] == "WAITING" and by[("erf", 0)]["reused_from"] is None
    assert by[("tanh", 0)]["status"] == "WAITING"
    # a divergence is a result of the configuration: reused, with its reason
    assert by[("arctan", 0)]["status"] == "DIVERGED" and by[("arctan", 0)]["reused_from"]
    assert by[("arctan", 0)]["failure"] == "loss not finite"
    # one more epoch is another key
    longer = create_study(_spec(["arctan"], epochs=2), settings=settings)
    assert {t["status"] for t in repo.list_trials(longer)} == {"WAITING"}


def test_the_code_version_covers_the_preset_registry_and_the_kernels() -> None:
    names = {p.as_posix() for p in trainer_sources()}
    for needed in ("workers/trainer.py", "workers/proxies/__init__.py", "kernels/_codegen.py",
                   "search_space/primitives.py", "normfree/specs.py"):  # fmt: skip
        assert any(n.endswith(needed) for n in names), needed
    assert len(V) == 16 and trainer_version() == V
