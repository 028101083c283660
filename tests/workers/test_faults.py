"""Faults, really: a Ray worker SIGKILLed mid-trial, a driver SIGKILLed mid-study, pause, cancel.

Nothing is mocked: the worker's PID comes from the marker file the task writes on start, the
driver runs as its own OS process with its own embedded Ray, and both are killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import optuna
import pytest

from normfree.settings import Settings
from normfree.specs import StudySpec
from normfree.workers import localray
from normfree.workers.driver import StudyDriver, create_study, optuna_study_name
from normfree.workers.execution import TrialStore
from tests.workers.engine_support import (
    driver_process,
    engine_settings,
    mid_trial,
    ray_cluster,
    wait_for,
)


@pytest.fixture(scope="module", autouse=True)
def _ray() -> Iterator[None]:
    yield from ray_cluster()


def _spec(n_functions: int = 3, epochs: int = 3, seeds: int = 1) -> StudySpec:
    fns = ["erf", "tanh", "arctan", "isru", "linear", "sin"][:n_functions]
    return StudySpec(
        kind="options",
        proxy="dit-tiny",
        seeds=seeds,
        functions=fns,
        options={"alpha0": [0.5]},
        epochs=epochs,
    )


class _Running(NamedTuple):
    settings: Settings
    study_id: int
    store: TrialStore
    thread: threading.Thread
    out: list  # receives the driver's summary when it returns


def _run_in_thread(tmp_path: Path, spec: StudySpec) -> _Running:
    """A study on a fresh SQLite database, its driver started in a thread."""
    url = f"sqlite:///{tmp_path / 'nf.db'}"
    settings = engine_settings(url)
    study_id = create_study(spec, settings=settings)
    out: list = []
    thread = threading.Thread(
        target=lambda: out.append(StudyDriver(study_id, settings=settings).run()), daemon=True
    )
    thread.start()
    return _Running(settings, study_id, TrialStore(url), thread, out)


def _assert_nothing_lost_or_duplicated(store: TrialStore, study_id: int, n: int) -> None:
    trials = store.repo.list_trials(study_id)
    assert len(trials) == n
    assert len({t["trial_key"] for t in trials}) == n
    assert {t["status"] for t in trials} == {"COMPLETE"}
    for t in trials:
        epochs = [c["epoch"] for c in store.repo.get_trial(t["id"])["curves"]]
        assert epochs == sorted(set(epochs)) and epochs[-1] == 3
    ostudy = optuna.load_study(
        study_name=optuna_study_name(study_id), storage=store.optuna_storage()
    )
    numbers = [t["optuna_number"] for t in trials]
    assert len(set(numbers)) == n  # one Optuna trial per row, kept across attempts
    by_number = {t.number: t.state for t in ostudy.trials}
    assert all(by_number[k] == optuna.trial.TrialState.COMPLETE for k in numbers)


def test_worker_killed_mid_trial_is_retried(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nf.db'}"
    settings = engine_settings(url)
    study_id = create_study(_spec(), settings=settings)
    store = TrialStore(url)
    markers = tmp_path / "markers"
    killed: dict[str, int] = {}

    def killer() -> None:
        # Kill the first trial's worker once it has recorded an epoch: truly mid-trial.
        def running_with_epoch() -> tuple[int, int] | None:
            for f in markers.glob("trial-*.pid") if markers.exists() else []:
                tid = int(f.stem.split("-")[1])
                if store.repo.get_trial(tid)["curves"]:
                    return tid, int(f.read_text())
            return None

        tid, pid = wait_for(running_with_epoch, every=0.02)
        os.kill(pid, signal.SIGKILL)
        killed.update(trial=tid, pid=pid)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    summary = StudyDriver(study_id, settings=settings, marker_dir=str(markers)).run()
    thread.join(timeout=5)
    assert killed, "the worker was never killed"
    assert summary.status == "complete" and summary.retried == 1
    row = store.repo.get_trial(killed["trial"])
    assert row["status"] == "COMPLETE" and row["attempt"] == 2
    assert row["worker"] and not row["worker"].endswith(f":{killed['pid']}")
    _assert_nothing_lost_or_duplicated(store, study_id, 3)


def test_worker_killed_every_attempt_fails_with_reason(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nf.db'}"
    settings = engine_settings(url, max_attempts=2)
    study_id = create_study(_spec(n_functions=1, epochs=20), settings=settings)
    store = TrialStore(url)
    markers = tmp_path / "markers"
    kills: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        seen: set[str] = set()
        while not stop.is_set():
            for f in markers.glob("trial-*.pid") if markers.exists() else []:
                text = f.read_text()
                if text and text not in seen:
                    seen.add(text)
                    f.unlink()
                    os.kill(int(text), signal.SIGKILL)
                    kills.append(int(text))
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    summary = StudyDriver(study_id, settings=settings, marker_dir=str(markers)).run()
    stop.set()
    thread.join(timeout=5)
    (row,) = store.repo.list_trials(study_id)
    assert len(kills) == 2 and summary.retried == 1
    assert row["status"] == "FAILED" and row["attempt"] == 2
    assert "attempt 2" in row["error"] and "Worker" in row["error"]


def test_driver_killed_mid_study_resumes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nf.db'}"
    lease = 3.0
    settings = engine_settings(url, lease_seconds=lease)
    study_id = create_study(_spec(n_functions=3, epochs=3), settings=settings)
    store = TrialStore(url)

    # The driver joins this module's Ray as its own job (as on a cluster): killing the driver
    # kills its job's tasks, not the cluster, and saves starting a second Ray here.
    env = {
        **os.environ,
        "NORMFREE_LEASE_SECONDS": str(lease),
        "NORMFREE_DATABASE_URL": url,
        "NORMFREE_RAY_ADDRESS": localray.address(),
    }
    proc = driver_process(study_id, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    family: set[int] = set()
    try:

        def midway() -> bool:
            family.update(localray.descendants(proc.pid))
            return mid_trial(store, study_id)

        wait_for(midway, timeout=180)
        running = {t["id"] for t in store.repo.list_trials(study_id, status="RUNNING")}
        family.update(localray.descendants(proc.pid))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # The new driver finds the dead one's RUNNING trials, waits out their leases, requeues.
        summary = StudyDriver(study_id, settings=settings).run()
        assert summary.status == "complete"
        assert summary.requeued_expired >= 1
        for tid in running:
            row = store.repo.get_trial(tid)
            assert row["status"] == "COMPLETE" and row["attempt"] >= 2
        _assert_nothing_lost_or_duplicated(store, study_id, 3)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in family:  # the dead driver's own Ray processes, by process id only
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_pause_stops_running_trials_uncharged_and_resume_finishes(tmp_path: Path) -> None:
    settings, study_id, store, thread, out = _run_in_thread(
        tmp_path, _spec(n_functions=2, epochs=8)
    )

    wait_for(lambda: mid_trial(store, study_id))
    store.repo.set_study_status(study_id, "paused")
    thread.join(timeout=120)
    assert out and out[0].status == "paused"
    counts = store.repo.study_progress(study_id)["counts"]
    assert counts["RUNNING"] == 0 and counts["WAITING"] >= 1
    # The interrupted trials went back uncharged: every attempt a WAITING row used was released
    # (the attempt number itself stays, as the fencing token against the paused run's writes).
    waiting = store.repo.list_trials(study_id, status="WAITING")
    assert all(t["attempt"] == t["releases"] for t in waiting)
    assert any(t["releases"] >= 1 for t in waiting)
    store.repo.set_study_status(study_id, "pending")
    summary = StudyDriver(study_id, settings=settings).run()
    assert summary.status == "complete"
    assert store.repo.study_progress(study_id)["counts"]["COMPLETE"] == 2


def test_cancel_stops_running_and_drops_waiting(tmp_path: Path) -> None:
    settings, study_id, store, thread, out = _run_in_thread(
        tmp_path, _spec(n_functions=5, epochs=20)
    )
    wait_for(lambda: store.repo.study_progress(study_id)["counts"]["RUNNING"] >= 1)
    store.repo.set_study_status(study_id, "cancelled")
    assert store.repo.cancel_waiting(study_id) >= 1
    thread.join(timeout=120)
    assert out and out[0].status == "cancelled"
    counts = store.repo.study_progress(study_id)["counts"]
    assert counts["RUNNING"] == 0 and counts["WAITING"] == 0
    assert counts["CANCELLED"] == 5 - counts["COMPLETE"]
    # A cancelled study stays cancelled: a new driver does nothing.
    assert StudyDriver(study_id, settings=settings).run().dispatched == 0
