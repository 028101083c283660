"""Store a trial trained outside a study (``train_trial`` in a notebook) with one call.

``record_trial(result, config, db=...)`` writes the result as a worker would: into a study of
its own (kind ``options``, one function, marked ``params.recorded``), through the repository's
lease and ``finish_trial``, so the trial, its curves and diagnostics, the study's arms and the
proxy's leaderboard show it exactly as they show trials a study ran. Passing the returned
study's id back (``study_id=``) gathers more seeds or functions into that study, so a notebook
loop over seeds gives one arm with a confidence interval.

Why through the database and not the REST API: the API takes results only from its own
workers. An endpoint that accepted a client's numbers would let any token holder put a
made-up arm on a leaderboard; a notebook that can write the database is trusted already.
"""

from __future__ import annotations

from typing import Any

from normfree.specs import StudySpec, TrialConfig, TrialResult

OWNER = "notebook"
LEASE_SECONDS = 300.0
MARK = "recorded"  # params key of studies made here (only those take more recorded trials)


def _default_settings(db: str | None) -> Any:
    from normfree.settings import get_settings

    base = get_settings()
    return base.model_copy(update={"database_url": db}) if db else base


def record_trial(
    result: TrialResult,
    config: TrialConfig,
    *,
    db: str | None = None,
    study_id: int | None = None,
    name: str | None = None,
) -> dict[str, int]:
    """Store ``result`` (of ``train_trial(config)``) and return ``{"study_id", "trial_id"}``.

    ``db``: a database URL (default: ``NORMFREE_DATABASE_URL``, else ``sqlite:///normfree.db``,
    the server's). ``study_id``: a study an earlier call made, to add this trial to (same
    proxy); else a new study named ``name``. A config the study already holds is refused
    (``ValueError``): a seed is stored once.
    """
    from normfree import storage

    if not isinstance(result, TrialResult) or not isinstance(config, TrialConfig):
        raise TypeError("record_trial(result, config): a TrialResult and its TrialConfig")
    store = storage.open(_default_settings(db), optuna=False)
    try:
        repo = store.repo
        sid = study_id if study_id is not None else _new_study(repo, config, name)
        if study_id is not None:
            _check_recorded(repo, study_id, config)
        axes = {"function": config.norm.name, **config.overrides, "seed": config.seed}
        (trial_id,) = repo.add_trials(sid, [(config, axes, None)])
        repo.set_study_status(sid, "running")
        try:
            _finish(repo, sid, trial_id, result)
        finally:
            repo.set_study_status(sid, "complete")
        return {"study_id": sid, "trial_id": trial_id}
    finally:
        store.close()


def _new_study(repo: Any, config: TrialConfig, name: str | None) -> int:
    spec = StudySpec(
        kind="options",
        name=name or f"recorded: {config.norm.name} on {config.proxy}",
        proxy=config.proxy,
        seeds=1,
        functions=[config.norm.name],
        options={k: [v] for k, v in config.overrides.items()},
        epochs=config.epochs,
        params={MARK: True},
    )
    # "creating" until its trial is added: a process killed before that leaves a row the next
    # server start removes (``api.services.state.recover_at_start``), not an empty study
    return repo.create_study(spec, status="creating")


def _check_recorded(repo: Any, study_id: int, config: TrialConfig) -> None:
    row = repo.get_study(study_id)
    if row is None:
        raise ValueError(f"no study {study_id}")
    spec = row.get("spec") if isinstance(row.get("spec"), dict) else {}
    if not (spec.get("params") or {}).get(MARK):
        raise ValueError(
            f"study {study_id} was not made by record_trial: only such studies take recorded "
            "trials (a study's driver owns its own trials)"
        )
    if row["proxy"] != config.proxy:
        raise ValueError(f"study {study_id} is on {row['proxy']}, the trial on {config.proxy}")


def _finish(repo: Any, study_id: int, trial_id: int, result: TrialResult) -> None:
    """Lease the new trial and write its result; a trial already finished is refused."""
    done = repo.get_trial(trial_id)
    if done is not None and done["status"] != "WAITING":
        raise ValueError(
            f"study {study_id} already holds this config as trial {trial_id} "
            f"({done['status'].lower()}): record another seed"
        )
    others = []
    try:
        while (leased := repo.lease_next(study_id, OWNER, LEASE_SECONDS)) is not None:
            if leased.id == trial_id:
                if not repo.finish_trial(leased.id, OWNER, leased.attempt, result):
                    raise RuntimeError(f"trial {trial_id}: its lease was lost while recording")
                return
            others.append(leased)  # another caller's trial, waiting to be recorded: not ours
        raise RuntimeError(f"trial {trial_id} could not be leased (another process holds it)")
    finally:
        for o in others:
            repo.release_lease(o.id, OWNER, o.attempt)


__all__ = ["record_trial"]
