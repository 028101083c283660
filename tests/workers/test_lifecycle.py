"""One study state machine for the API and the CLI, the in-process runner, and "failed"."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from normfree.specs import NormSpec, StudySpec, TrialConfig
from normfree.storage import Repository
from normfree.workers import lifecycle
from normfree.workers.lifecycle import StudyRunner, TransitionError, steer
from tests.workers.engine_support import engine_settings


def _study(repo: Repository, waiting: int = 2) -> int:
    sid = repo.create_study(StudySpec(kind="options", proxy="vit-tiny", functions=["erf"]))
    configs = [
        TrialConfig(proxy="vit-tiny", norm=NormSpec(name="erf"), seed=s) for s in range(waiting)
    ]
    repo.add_trials(sid, [(c, {"seed": c.seed}, None) for c in configs])
    return sid


def test_pause_resume_cancel_follow_one_table(repo: Repository) -> None:
    sid = _study(repo)
    assert steer(repo, sid, "pause").after == "paused"
    with pytest.raises(TransitionError, match="cannot pause a study that is paused"):
        steer(repo, sid, "pause")
    done = steer(repo, sid, "resume")
    assert (done.before, done.after) == ("paused", "running")
    assert repo.get_study(sid)["status"] == "running"
    # Resuming a running study is a restart: only for a caller that starts a driver.
    with pytest.raises(TransitionError):
        steer(repo, sid, "resume")
    assert steer(repo, sid, "resume", restart=True).after == "running"
    cancelled = steer(repo, sid, "cancel")
    assert cancelled.after == "cancelled" and cancelled.cancelled_waiting == 2
    for action in lifecycle.ACTIONS:
        with pytest.raises(TransitionError, match="cancelled"):
            steer(repo, sid, action, restart=True)
    with pytest.raises(KeyError):
        steer(repo, sid + 99, "pause")


def test_a_failed_study_can_be_resumed_or_cancelled(repo: Repository) -> None:
    sid = _study(repo)
    repo.set_study_status(sid, "failed")
    with pytest.raises(TransitionError):
        steer(repo, sid, "pause")
    assert steer(repo, sid, "resume").after == "running"
    repo.set_study_status(sid, "failed")
    assert steer(repo, sid, "cancel").after == "cancelled"


def test_resume_while_the_paused_run_is_still_ending_runs_again() -> None:
    """A resume that arrives while the paused driver finishes its in-flight trials is kept."""
    first_run_may_end = threading.Event()
    runs: list[int] = []
    second_run = threading.Event()

    def drive(study_id: int) -> None:
        runs.append(study_id)
        if len(runs) == 1:
            first_run_may_end.wait(10)
        else:
            second_run.set()

    runner = StudyRunner(engine_settings("sqlite://"), drive=drive)
    runner.submit(7)
    while not runs:  # the first run is under way (paused, finishing its trials)
        threading.Event().wait(0.01)
    runner.submit(7)  # the resume
    assert runner.is_active(7)
    first_run_may_end.set()
    assert second_run.wait(10), "the resume was dropped"
    assert runs == [7, 7]
    runner.close()


def test_runner_keeps_a_failed_runs_reason() -> None:
    done = threading.Event()

    def drive(study_id: int) -> None:
        done.set()
        raise RuntimeError("storage went away")

    runner = StudyRunner(engine_settings("sqlite://"), drive=drive)
    runner.submit(3)
    assert done.wait(10)
    while runner.is_active(3):
        threading.Event().wait(0.01)
    # one line for the page; the details (and the reference) go to the server log
    assert runner.errors[3].startswith("the study's driver stopped with RuntimeError [ref ")
    runner.close()


class _BrokenExecutor:
    """An executor whose cluster is gone: every dispatch fails."""

    def start(self) -> _BrokenExecutor:
        return self

    def slots(self) -> int:
        return 1

    def submit(self, job: Any) -> Any:
        raise ConnectionError("the cluster is gone")

    def cancel(self, ref: Any) -> None:  # nothing was dispatched
        pass


def test_a_driver_that_stops_on_an_error_marks_the_study_failed(tmp_path: Path) -> None:
    from normfree.workers.driver import StudyDriver, create_study

    settings = engine_settings(f"sqlite:///{tmp_path / 'nf.db'}")
    spec = StudySpec(kind="options", proxy="vit-tiny", seeds=1, functions=["erf"], epochs=1)
    sid = create_study(spec, settings=settings)
    driver = StudyDriver(sid, settings=settings, executor=_BrokenExecutor())  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        driver.run()
    assert driver.store.repo.get_study(sid)["status"] == "failed"
    assert steer(driver.store.repo, sid, "resume").after == "running"


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({"COMPLETE": 3}, "complete"),
        ({"COMPLETE": 1, "FAILED": 5}, "complete"),  # some failed: complete, with the count
        ({"FAILED": 4}, "failed"),
        ({"FAILED": 2, "DIVERGED": 2}, "failed"),
        ({"DIVERGED": 3}, "failed"),  # nothing trained, whatever the reason
        ({"PRUNED": 2, "FAILED": 1}, "failed"),
        ({"CANCELLED": 2}, "complete"),  # nothing ran: not a failure of the trials
        ({}, "complete"),
    ],
)
def test_outcome_of_a_finished_study(counts: dict[str, int], expected: str) -> None:
    assert lifecycle.outcome(counts) == expected
